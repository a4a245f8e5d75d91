"""A real PostgreSQL server for the tests, from Debian's packages (``make test`` installs them): a fresh
cluster in a temporary folder on a free port, stopped and removed when the context exits."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dspark_bench.loadtests.deploy.local import free_port


class PostgresUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class PostgresServer:
    port: int
    workdir: Path  # a folder the test may use too (not under pytest's root-only tmp_path)

    def url(self, database: str, driver: str = "postgresql") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise PostgresUnavailable("PostgreSQL server not found: `make test` installs Debian's postgresql (make gpustack)")
    return Path(found[-1]).parent


def as_postgres(argv: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root; CI runs as root
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise PostgresUnavailable(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")


@contextlib.contextmanager
def running_postgres(*databases: str, prefix: str = "dspark-pg-") -> Iterator[PostgresServer]:
    pg = postgres_bin()
    # not under pytest's tmp_path: its root-only parents would shut the postgres user out
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    pg_dir, port = workdir / "pg", free_port()
    pg_dir.mkdir()
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres")
        shutil.chown(pg_dir, "postgres")
    pg_ctl = [str(pg / "pg_ctl"), "-D", str(pg_dir), "-l", str(workdir / "postgres.log")]
    try:
        _run(as_postgres([str(pg / "initdb"), "-D", str(pg_dir), "-A", "trust", "-U", "postgres"]))
        _run(as_postgres([*pg_ctl, "-o", f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1", "-w", "start"]))
        for database in databases:
            _run(as_postgres([str(pg / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database]))
        yield PostgresServer(port, workdir)
    finally:
        subprocess.run(as_postgres([*pg_ctl, "-m", "fast", "stop"]), capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
