"""The machine specrun is installed on: the build it makes, AMX kept off, native crashes
explained, signals, `specrun doctor`, and the device reported everywhere."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from specrun import doctor
from specrun.llama import devices, install
from specrun.llama import model as runtime
from specrun.llama.params import load_params
from tests.support.cli import long_generation
from tests.support.processes import default_signals, within
from tests.support.tinymodels import write_tiny_model

ROOT = Path(__file__).resolve().parents[2]
SAPPHIRE_RAPIDS = {
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "bmi2",
    "avx_vnni",
    "avx512f",
    "avx512cd",
    "avx512vl",
    "avx512dq",
    "avx512bw",
    "avx512vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
}
CPU_BUILD = devices.BuildInfo(
    "0.3.36", ("CPU",), ("AVX", "AVX2", "FMA", "F16C", "REPACK"), ("CPU_REPACK",)
)
AMX_BUILD = replace(
    CPU_BUILD,
    cpu_features=CPU_BUILD.cpu_features + ("AVX512", "AMX_INT8"),
    extra_buffer_types=("AMX", "CPU_REPACK"),
)


def specrun(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specrun", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
        cwd=ROOT,
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specrun: error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


# --- the install: this CPU's vector extensions, never AMX --------------------------------


def options(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args)


def test_an_amx_host_builds_its_avx512_and_vnni_but_not_amx():
    built = options(install.cpu_cmake_args(SAPPHIRE_RAPIDS, "x86_64"))
    assert built["GGML_NATIVE"] == "OFF"  # -march=native would switch AMX on
    assert {built[o] for o in install.AMX_OPTIONS} == {"OFF"}
    for option in (
        "GGML_AVX2",
        "GGML_AVX512",
        "GGML_AVX512_VNNI",
        "GGML_AVX512_BF16",
        "GGML_AVX_VNNI",
        "GGML_FMA",
    ):
        assert built[option] == "ON", option


def test_a_host_without_avx512_gets_no_avx512():
    built = options(install.cpu_cmake_args({"avx", "avx2", "fma", "f16c", "avx512f"}, "x86_64"))
    assert built["GGML_AVX2"] == "ON"
    assert built["GGML_AVX512"] == "OFF"  # avx512f alone is not the five GGML_AVX512 compiles for


def test_other_architectures_keep_llama_cpps_native_build():
    assert install.cpu_cmake_args({"fp", "asimd"}, "aarch64") == []
    assert install.cpu_cmake_args(set(), "x86_64") == []  # nothing known of the CPU


def test_the_users_cmake_args_come_last_and_so_win():
    args = install.cmake_args(SAPPHIRE_RAPIDS, "-DGGML_CUDA=on -DGGML_NATIVE=ON", "x86_64").split()
    assert args[-2:] == ["-DGGML_CUDA=on", "-DGGML_NATIVE=ON"]
    assert args.index("-DGGML_NATIVE=OFF") < args.index("-DGGML_NATIVE=ON")


def test_every_build_has_the_rpc_backend_and_the_user_may_still_turn_it_off():
    assert install.cmake_args(set(), "", "aarch64").split() == ["-DGGML_RPC=ON"]
    assert install.cmake_args({"avx2"}, "-DGGML_RPC=OFF", "x86_64").split()[-1] == "-DGGML_RPC=OFF"


def test_the_build_flags_decide_which_cached_wheel_is_used():
    cpu = install.cmake_args({"avx2"}, "", "x86_64")
    cuda = install.cmake_args({"avx2"}, "-DGGML_CUDA=on", "x86_64")
    assert install.build_key("0.3.36", cpu) != install.build_key("0.3.36", cuda)
    assert install.build_key("0.3.36", cpu) != install.build_key("0.3.37", cpu)
    assert install.build_key("0.3.36", cpu) == install.build_key("0.3.36", cpu)


def test_a_wheel_cache_that_is_a_file_is_one_line(tmp_path):
    """`make`'s first step, with SPECRUN_CACHE naming a file: no traceback."""
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [sys.executable, str(ROOT / "specrun" / "llama" / "install.py"), str(tmp_path / "pip")],
        capture_output=True,
        text=True,
        env={**os.environ, "SPECRUN_CACHE": str(blocker)},
        timeout=60,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("specrun: error: cannot build or install")
    assert len(result.stderr.strip().splitlines()) == 1 and str(blocker) in result.stderr
    assert not (tmp_path / "pip").exists()


def test_the_pinned_version_is_read_from_pyproject():
    assert (
        f'"llama-cpp-python=={install.pinned_version()}"' in (ROOT / "pyproject.toml").read_text()
    )


# --- run time: whatever build is loaded, weights stay off AMX ----------------------------


@pytest.mark.parametrize(
    "build, allow, extra",
    [
        (CPU_BUILD, False, True),  # no AMX: REPACK and the rest as llama.cpp likes
        (AMX_BUILD, False, False),  # AMX in the build: extra buffer types off
        (AMX_BUILD, True, True),  # SPECRUN_AMX=1: the user's call
    ],
)
def test_load_parameters_follow_the_build(build, allow, extra):
    params = load_params(12, build, allow_amx=allow)
    assert params.use_extra_bufts is extra
    assert params.n_gpu_layers == 12


@pytest.mark.parametrize(
    "value, allowed", [("1", True), ("on", True), ("yes", True), ("0", False), ("", False)]
)
def test_the_amx_switch(value, allowed):
    assert devices.amx_allowed({devices.AMX_ENV: value}) is allowed


def test_the_guarded_load_keeps_repack_and_the_logits(demo_pair, monkeypatch, capfd):
    """The Q4_0 draft loaded as on an AMX build: extra buffer types off, every matmul
    weight handed to REPACK by an override, and the same answer as the default load."""
    draft = demo_pair[1]
    with runtime.Model(draft, n_ctx=256) as default:
        tokens = default.tokenize("The quick brown fox jumps over the lazy dog, and then")
        expected = default.logits(tokens, 4)
    monkeypatch.setattr(runtime, "build_info", lambda: AMX_BUILD)
    capfd.readouterr()
    with runtime.Model(draft, n_ctx=256, verbose=True) as guarded:
        got = guarded.logits(tokens, 4)
    log = capfd.readouterr().err
    assert log.count("buffer type overridden to CPU_REPACK") == 7 * guarded.n_layer
    assert "token_embd.weight" not in "".join(
        line for line in log.splitlines() if "overridden" in line
    )
    assert (got.argmax(-1) == expected.argmax(-1)).all()


def test_repack_takes_only_what_its_rules_accept():
    tensors = [
        ("token_embd.weight", "Q4_0", (576, 49152)),  # GET_ROWS, not a matmul
        ("blk.0.attn_q.weight", "Q4_0", (576, 576)),
        ("blk.1.attn_q.weight", "Q4_0", (576, 576)),
        ("blk.0.attn_v.weight", "Q6_K", (576, 192)),  # Q4_K_M mixes in Q6_K: no x86 REPACK
        ("blk.0.ffn_down.weight", "Q4_K", (1536, 576)),
        ("blk.1.ffn_down.weight", "Q4_K", (1536, 100)),  # rows not a multiple of 8
        ("blk.0.ffn_up.weight", "Q2_K", (576, 1536)),  # needs AVX512
        ("blk.0.attn_norm.weight", "F32", (576,)),
        ("output.weight", "Q4_0", (576, 49152)),
    ]
    assert devices.repack_patterns(tensors, AMX_BUILD) == [
        r"^blk\.(0|1)\.attn_q\.weight$",
        r"^blk\.(0)\.ffn_down\.weight$",
        r"^blk\.(0)\.ffn_up\.weight$",
        r"^output\.weight$",
    ]
    assert r"^blk\.(0)\.ffn_up\.weight$" not in devices.repack_patterns(
        tensors, CPU_BUILD
    )  # no AVX512
    no_repack = replace(AMX_BUILD, cpu_features=("AVX2", "AVX512"))
    assert devices.repack_patterns(tensors, no_repack) == []


def test_the_loaded_build_describes_itself():
    build = devices.build_info()
    assert "CPU" in build.backends
    assert build.version == install.pinned_version()
    host = install.host_cpu_flags()
    if "avx2" in host:
        assert "AVX2" in build.cpu_features
    assert not build.has_amx  # our own install never builds it


def test_metal_shows_as_metal():
    assert devices.backend_name("MTL") == "Metal"
    assert (
        devices.accelerator_name(replace(CPU_BUILD, backends=("Metal", "BLAS", "CPU"))) == "Metal"
    )
    assert devices.accelerator_name(CPU_BUILD) == "CPU"


# --- a native crash explains itself ------------------------------------------------------


def supervised(body: str) -> subprocess.CompletedProcess:
    """`body` run as the work of a supervised process, the way the `specrun` command runs."""
    program = (
        "import ctypes, os, signal, sys\n"
        "from specrun.llama.supervise import supervise\ndef work():\n"
        + textwrap.indent(textwrap.dedent(body).strip() + "\n", "    ")
        + "    return 0\nsys.exit(supervise(work))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def test_a_segfault_prints_one_line_and_keeps_what_was_written():
    result = supervised("""
        sys.stdout.write("partial answer"); sys.stdout.flush()
        ctypes.string_at(0)
    """)
    assert result.returncode == 128 + signal.SIGSEGV
    assert result.stdout == "partial answer"
    line = one_error_line(result)
    assert "segmentation fault" in line and "a bug" in line and "--gpu-layers 0" in line
    assert "specrun doctor" in line


def test_an_illegal_instruction_points_at_the_build():
    result = supervised("os.kill(os.getpid(), signal.SIGILL)")
    assert result.returncode == 128 + signal.SIGILL
    assert "CPU features" in one_error_line(result)


def test_an_out_of_memory_kill_says_so():
    result = supervised("os.kill(os.getpid(), signal.SIGKILL)")
    assert result.returncode == 128 + signal.SIGKILL
    assert "out of memory" in one_error_line(result)


def test_a_llama_cpp_assertion_is_one_line_and_no_backtrace(tmp_path):
    broken = write_tiny_model(tmp_path / "duplicate-token.gguf", duplicate_token=True)
    result = specrun("run", "-t", str(broken), "--temp", "0", "-n", "4", "hello")
    assert result.returncode == 128 + signal.SIGABRT
    assert result.stdout == ""
    line = one_error_line(result)
    assert "GGML_ASSERT" in line and "llama-vocab.cpp" in line and "/tmp/" not in line


# --- signals: Ctrl-C, SIGTERM and SIGHUP end the same clean way --------------------------


def wait_for_generation(process: subprocess.Popen, seconds: float = 4.0) -> None:
    """--json writes nothing until the end: give loading and the first tokens time."""
    time.sleep(seconds)
    assert process.poll() is None, process.stderr.read()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_generation_keeps_the_json_object(demo_pair, signum):
    process = long_generation(demo_pair[0], "--json", text=True, cwd=ROOT)
    wait_for_generation(process)
    process.send_signal(signum)  # to the parent's pid alone, as `kill` or `timeout` do
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    record = json.loads(out)
    assert record["finish_reason"] == "interrupted"
    # On a loaded machine the signal may land before the first token, or after the first of
    # " 7" alone (the space is a token of its own); what was made is kept.
    text = record["text"]
    assert text.startswith(" 7") or " 7".startswith(text), text
    assert "Traceback" not in err and "double free" not in err


def test_two_ctrl_c_in_quick_succession(demo_pair):
    process = long_generation(demo_pair[0], "--json", text=True, cwd=ROOT)
    wait_for_generation(process)
    process.send_signal(signal.SIGINT)
    time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert json.loads(out)["finish_reason"] == "interrupted"
    assert "Traceback" not in err and "corruption" not in err and "Exception ignored" not in err


def test_ctrl_c_during_loading_is_not_swallowed(demo_pair):
    """llama.cpp logs while it loads; the interrupt must not vanish in the log callback."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specrun",
            "run",
            "-t",
            str(demo_pair[0]),
            "--verbose",
            "--temp",
            "0",
            "-n",
            "3000",
            "--raw",
            "1, 2, 3,",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        text=True,
        preexec_fn=default_signals,  # stopped with Ctrl-C
    )
    within(process, process.stderr.readline, "llama.cpp's log")  # the load is under way
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    assert "Exception ignored" not in err and "Traceback" not in err


def test_closing_a_model_twice_frees_it_once(tiny_target):
    model = runtime.Model(tiny_target, n_ctx=64)
    model.close()
    model.close()
    model.__del__()


# --- specrun doctor, and the device in every front end -----------------------------------


def test_doctor_json_on_this_machine(demo_pair):
    result = specrun("doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "CPU" in report["build"]["backends"]
    assert report["build"]["version"] == install.pinned_version()
    cpu = [d for d in report["devices"] if d["kind"] == "CPU"]
    assert cpu and cpu[0]["total_bytes"] > 0
    assert report["host"]["amx"] == bool(install.host_cpu_flags() & {"amx_int8", "amx_tile"})
    assert report["amx_guard"] is False  # this machine's build has no AMX
    assert set(report["caches"]) == {"specrun", "huggingface", "llama wheels"}
    assert not any("CPU features this CPU lacks" in p["problem"] for p in report["problems"])
    placement = report["demo_placement"]
    assert (
        placement["target_bytes"] > 270_000_000
    )  # the F16 weights, and the KV cache and compute on top
    if not any(d["kind"] in ("GPU", "iGPU") for d in report["devices"]):
        assert placement["fit"] == "no GPU: everything runs on the CPU"


def test_doctor_text_names_build_devices_and_caches():
    result = specrun("doctor")
    assert result.returncode == 0, result.stderr
    for heading in ("llama-cpp-python", "backends:", "devices", "caches", "demo pair:"):
        assert heading in result.stdout
    assert (
        "specrun's sampling: compiled" in result.stdout
    )  # setup.py built specrun/core/_sampling.c


def report_for(
    build: devices.BuildInfo,
    gpus: list[doctor.HostGpu],
    flags: set[str] | None = None,
    allow_amx: bool = False,
) -> doctor.Report:
    return doctor.Report(
        build=build,
        devices=[],
        host_cpu_flags=flags or {"avx", "avx2", "fma", "f16c"},
        host_gpus=gpus,
        amx_allowed=allow_amx,
        demo_pair_present=True,
    )


def test_doctor_gives_the_cuda_reinstall_for_a_cpu_build_on_an_nvidia_machine():
    found = doctor.problems(report_for(CPU_BUILD, [doctor.HostGpu("NVIDIA", "CUDA 12.4", (12, 4))]))
    assert len(found) == 1 and "NVIDIA GPU" in found[0].problem
    assert 'CMAKE_ARGS="-DGGML_CUDA=on" pip install --force-reinstall' in found[0].fix
    assert "llama-cpp-python==0.3.36" in found[0].fix and "whl/cu124" in found[0].fix


@pytest.mark.parametrize(
    "cuda, index",
    [
        ((12, 4), "cu124"),
        ((12, 8), "cu125"),
        ((13, 1), "cu130"),
        ((11, 8), "cu118"),
        (None, "cu124"),
    ],
)
def test_the_newest_cuda_wheel_the_driver_runs(cuda, index):
    assert doctor.cuda_wheel_index(cuda) == index


def test_doctor_metal_and_no_problem_once_built_for_the_gpu():
    metal = doctor.problems(report_for(CPU_BUILD, [doctor.HostGpu("Apple", "Apple silicon")]))
    assert "-DGGML_METAL=on" in metal[0].fix and "whl/metal" in metal[0].fix
    built = replace(CPU_BUILD, backends=("Metal", "BLAS", "CPU"))
    report = report_for(built, [doctor.HostGpu("Apple", "Apple silicon")])
    m2 = devices.Device("MTL0", "Apple M2 Pro", "GPU", "Metal", 20 << 30, 21 << 30)
    assert doctor.problems(replace(report, devices=[m2])) == []
    # A Metal build that sees no Metal device runs on the CPU, and says so.
    (alone,) = doctor.problems(report)
    assert "built with Metal but sees no Metal device" in alone.problem


def test_doctor_warns_of_a_build_for_features_this_cpu_lacks():
    found = doctor.problems(report_for(AMX_BUILD, [], flags={"avx", "avx2", "fma", "f16c"}))
    assert any("AVX512" in p.problem and "illegal instruction" in p.problem for p in found)


def test_doctor_says_how_to_build_a_missing_compiled_sampling():
    found = doctor.problems(replace(report_for(CPU_BUILD, []), compiled_sampling=False))
    assert len(found) == 1 and "sampling" in found[0].problem and "C compiler" in found[0].fix


def test_doctor_warns_when_amx_is_switched_on():
    found = doctor.problems(report_for(AMX_BUILD, [], flags=SAPPHIRE_RAPIDS, allow_amx=True))
    assert [p for p in found if "AMX" in p.problem and devices.AMX_ENV in p.fix]


def on_windows(report: doctor.Report, flags: set[str]) -> doctor.Report:
    """The report as Windows gathers it: IsProcessorFeaturePresent tells AVX, AVX2 and
    AVX-512F, nothing else."""
    known = frozenset(doctor.WINDOWS_CPU_FEATURES)
    return replace(report, system="Windows", host_cpu_flags=flags, host_cpu_flags_known=known)


def test_doctor_on_windows_gives_powershell_and_no_make():
    nvidia = [doctor.HostGpu("NVIDIA", "CUDA 12.4", (12, 4))]
    (cuda,) = doctor.problems(on_windows(report_for(CPU_BUILD, nvidia), {"avx", "avx2"}))
    assert '$env:CMAKE_ARGS="-DGGML_CUDA=on"; pip install --force-reinstall' in cuda.fix
    assert r".venv\Scripts\python specrun\llama\install.py .venv\Scripts\pip" in cuda.fix
    bare = replace(report_for(CPU_BUILD, []), compiled_sampling=False, demo_pair_present=False)
    found = doctor.problems(on_windows(bare, {"avx", "avx2"}))
    assert [p for p in found if "Visual Studio" in p.fix and r".venv\Scripts\pip" in p.fix]
    assert not [p for p in found if "make" in p.fix]


def test_doctor_on_windows_judges_only_the_cpu_features_it_can_read():
    # AVX-512F is readable and absent: the AVX512 build is refused. FMA and F16C are not
    # readable there, so they are not called missing.
    found = doctor.problems(on_windows(report_for(AMX_BUILD, []), {"avx", "avx2"}))
    (lacking,) = [p for p in found if "CPU features this CPU lacks" in p.problem]
    assert "(AVX512)" in lacking.problem
    with_avx512 = on_windows(report_for(AMX_BUILD, []), {"avx", "avx2", "avx512f"})
    assert not [p for p in doctor.problems(with_avx512) if "lacks" in p.problem]
    unreadable = replace(report_for(AMX_BUILD, [], flags={"avx"}), host_cpu_flags_known=frozenset())
    assert not [p for p in doctor.problems(unreadable) if "lacks" in p.problem]
    (features,) = [line for line in doctor.render_text(unreadable) if "CPU features:" in line]
    assert features.endswith("(not checked: this CPU's own cannot be read here)")


def test_json_and_stats_name_the_device(tiny_target):
    result = specrun("run", "-t", str(tiny_target), "--temp", "0", "-n", "4", "--json", "the sea")
    record = json.loads(result.stdout)
    assert record["device"] == "CPU" and record["gpu_layers"] == ["0/2"]
    stats = specrun("run", "-t", str(tiny_target), "--temp", "0", "-n", "4", "--stats", "the sea")
    assert "device                CPU, GPU layers 0/2" in stats.stderr


def test_gpu_layers_on_a_cpu_build_warn_once(tiny_target):
    result = specrun(
        "run", "-t", str(tiny_target), "--temp", "0", "-n", "4", "--gpu-layers", "10", "the sea"
    )
    assert result.returncode == 0
    assert (
        result.stderr.count("--gpu-layers is ignored: this llama.cpp build has no GPU backend") == 1
    )


def test_running_out_of_memory_is_named_as_such(demo_pair):
    """A real allocation failure, not a corrupt file: the address space is capped so the
    weights map but the 8192-token KV cache (188 MiB) cannot be allocated."""
    import resource

    baseline = subprocess.run(
        [
            sys.executable,
            "-c",
            "import specrun, re; print(re.search(r'VmSize:\\s+(\\d+)', "
            "open('/proc/self/status').read()).group(1))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    limit = int(baseline.stdout) * 1024 + demo_pair[0].stat().st_size + 100 * 2**20

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specrun",
            "run",
            "-t",
            str(demo_pair[0]),
            "--ctx",
            "8192",
            "--threads",
            "1",
            "--temp",
            "0",
            "-n",
            "4",
            "hi",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        preexec_fn=cap_memory,
    )
    assert result.returncode in (1, 128 + signal.SIGABRT), result.stderr
    line = one_error_line(result)
    assert "memory" in line and "--ctx" in line and "--gpu-layers" in line
    assert "corrupt" not in line and "`" not in line
