"""The paired A/B load-test harness: deploy arms, drive them with Locust, validate every response."""
