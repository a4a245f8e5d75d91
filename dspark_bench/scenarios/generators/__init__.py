"""Seeded generators, one module per scenario; ``pools`` holds their shared word lists."""
