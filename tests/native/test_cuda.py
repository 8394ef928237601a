"""The CUDA backend: what the build reports (always), and on a machine with an NVIDIA GPU (tests marked gpu,
skipped without one) each device kernel against the float64 product of gguf's dequantized weights, with the
same error bound the CPU kernels meet (tests/native/test_kernels.py) plus the device's own summation order.

A machine with nvcc on PATH must have built the backend (unless LOCALLLM_CUDA=OFF): that is how CI, which has
the toolkit but no GPU, catches a change that breaks the CUDA build or its detection.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import gpu, no_gpu
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as ref_dequantize
from localllm import backends, native
from quant_blocks import random_rows

U = 2.0**-23
GPU_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K]


def test_backends_report_what_was_built_and_why_cuda_is_absent():
    b = backends()
    assert b["cpu"]["current"] in b["cpu"]["paths"] and "scalar" in b["cpu"]["paths"]
    cuda = b["cuda"]
    assert isinstance(cuda["compiled"], bool) and isinstance(cuda["devices"], list)
    if not cuda["devices"]:
        assert cuda["error"], "no device and no reason given"
    if shutil.which("nvcc") and os.environ.get("LOCALLLM_CUDA", "").upper() not in ("OFF", "0", "FALSE", "NO"):
        assert cuda["compiled"], f"nvcc is on PATH but the CUDA backend was not built: {cuda['error']}"
    if cuda["compiled"]:
        assert cuda["runtime_version"] >= 12000


@no_gpu
def test_device_entry_points_fail_cleanly_without_a_device():
    rows = random_rows(T.Q8_0, 4, 64, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="CUDA|not compiled"):
        native.testing.cuda_qgemv(int(T.Q8_0), rows, 64, np.ones((1, 64), np.float32))


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qt", GPU_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 3, 8, 9, 20])
def test_qgemv_matches_the_float64_product(qt, n):
    rng = np.random.default_rng(int(qt) * 10 + n)
    # K-quant rows are whole 256-weight super-blocks (896 is not: the first card run's Q4_K failure was this test's);
    # an odd count of them (1, 19) leaves Q6_K's 210-byte super-blocks unaligned to 4 bytes: the decode kernel
    # must take such rows (the 1.5B's ffn_down, k = 8960 = 35 x 256, in its Q6_K layers)
    shapes = ((37, 256), (160, 1536), (64, 4864)) if qt in (T.Q4_K, T.Q6_K) else ((37, 256), (160, 896), (64, 4864))
    for m, k in shapes:
        rows = random_rows(qt, m, k, rng)
        w64 = ref_dequantize(rows, qt).reshape(m, k).astype(np.float64)
        x = rng.standard_normal((n, k), dtype=np.float32) * np.exp(rng.standard_normal(k)).astype(np.float32)
        y = native.testing.cuda_qgemv(int(qt), rows, k, x)
        x64 = x.astype(np.float64)
        dx = np.abs(x64).reshape(n, -1, 32).max(axis=2) / 127
        act_err = np.repeat(dx, 32, axis=1) / 2 + 8 * U * np.abs(x64)  # int8 rounding per 32, as on the CPU
        bound = act_err @ np.abs(w64).T + (k / 16 + 16) * U * ((np.abs(x64) + act_err) @ np.abs(w64).T)
        err = np.abs(y - x64 @ w64.T)
        assert np.all(err <= bound), f"{qt.name} m={m} k={k} n={n}: max excess {np.max(err - bound)}"
        cpu = native.matmul_raw(int(qt), rows, k, x)
        assert np.max(np.abs(y - cpu)) <= np.max(bound), f"{qt.name}: device and CPU differ beyond the bound"


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qt", GPU_TYPES, ids=lambda t: t.name)
def test_qgemv_rows_do_not_depend_on_n(qt):
    """The device's half of the batch-invariance contract (issue 32, item 4): y[c] computed among N activation rows
    (N = 1..17, 64, 300; at every offset in a block of 8 rows) is the bits of y[c] computed alone, as the CPU's
    tests/native/test_batch_invariance.py checks each CPU path."""
    rng = np.random.default_rng(700 + int(qt))
    k = 1536 if qt in (T.Q4_K, T.Q6_K) else 896
    rows = random_rows(qt, 37, k, rng)
    x = rng.standard_normal((309, k), dtype=np.float32)
    x[3, :] = 0.0  # an all-zero row
    x[9, 64:96] *= 3000.0  # a massive activation block
    # the rows compared (each computed alone once): every row of the small steps, and some of the large ones' in
    # each of their 8- and 32-row blocks
    alone = {
        c: native.testing.cuda_qgemv(int(qt), rows, k, x[c : c + 1])[0]
        for c in list(range(27)) + [40, 63, 71, 200, 308]
    }
    # "auto" takes the tensor-core tiles from 128 rows (LOCALLLM_CUDA_MMQ); "mmq" forces them at every N
    runs = [("auto", n, start) for n in list(range(1, 18)) + [64, 300] for start in ((0, 3, 9) if n < 300 else (0, 9))]
    runs += [("mmq", n, start) for n in (1, 9, 64, 300) for start in (0, 9)]
    for kernel, n, start in runs:
        y = native.testing.cuda_qgemv(int(qt), rows, k, x[start : start + n], kernel=kernel)
        bad = [c for c in alone if start <= c < start + n and np.any(y[c - start] != alone[c])]
        assert not bad, f"{qt.name} {kernel}: N={n} from row {start}: rows {bad[:5]} differ from alone"


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["qgemv", "mmq"])
@pytest.mark.parametrize("qt", GPU_TYPES, ids=lambda t: t.name)
def test_the_card_computes_the_emulators_bits(qt, kernel):
    """The int8 kernels on the card give the bits of their source run on the CPU by the warp emulator
    (tests/native/test_cuda_emulated.py), which checks them against float64 and each other in every build: so a
    difference here is the emulator's model of the device (mma's fragment layout, the _rn arithmetic) or a race
    the emulator cannot show."""
    rng = np.random.default_rng(40 + int(qt))
    m, k = 70, 2560
    rows = random_rows(qt, m, k, rng)
    for n in (1, 9, 70):
        x = rng.standard_normal((n, k), dtype=np.float32)
        y = native.testing.cuda_qgemv(int(qt), rows, k, x, kernel=kernel)
        emulated = native.testing.cuda_emulated_product(int(qt), rows, k, x, kernel)
        diff = np.argwhere(y != emulated)
        assert not len(diff), f"{qt.name} {kernel} n={n}: {len(diff)} outputs differ, first at {diff[0]}"


@gpu
@pytest.mark.gpu
def test_qgemv_refuses_what_it_does_not_run():
    rows = random_rows(T.Q8_0, 4, 64, np.random.default_rng(0))
    with pytest.raises(ValueError, match="n must be in"):
        native.testing.cuda_qgemv(int(T.Q8_0), rows, 64, np.ones((0, 64), np.float32))
    q5k = random_rows(T.Q5_K, 4, 256, np.random.default_rng(0))
    with pytest.raises(ValueError, match="not supported on CUDA"):
        native.testing.cuda_qgemv(int(T.Q5_K), q5k, 256, np.ones((1, 256), np.float32))
    # Q4_1 is read in 32-bit words: rows 42 bytes apart are refused (Q6_K's 16-bit reads take any even row)
    q41 = np.pad(random_rows(T.Q4_1, 4, 64, np.random.default_rng(0)), ((0, 0), (0, 2)))[:, :40]
    with pytest.raises(ValueError, match="4-byte aligned rows"):
        native.testing.cuda_qgemv(int(T.Q4_1), q41, 64, np.ones((1, 64), np.float32))


@gpu
@pytest.mark.gpu
def test_a_bad_xsum_setting_is_refused_naming_it():
    """LOCALLLM_CUDA_XSUM (the decode kernel's shared activation sums: 1, the default, or 0) is read at the first
    product of several rows; any other value is refused with its name. In a process of its own: the value is read
    once."""
    code = (
        "import numpy as np\n"
        "from gguf import GGMLQuantizationType as T\n"
        "from localllm import native\n"
        "from quant_blocks import random_rows\n"
        "rows = random_rows(T.Q4_0, 4, 64, np.random.default_rng(0))\n"
        "try:\n"
        "    native.testing.cuda_qgemv(int(T.Q4_0), rows, 64, np.ones((3, 64), np.float32), 'qgemv')\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    models = os.path.join(os.path.dirname(__file__), "..", "..", "models")  # quant_blocks
    env = {
        **os.environ,
        "LOCALLLM_CUDA_XSUM": "yes",
        "PYTHONPATH": os.pathsep.join([models, os.environ.get("PYTHONPATH", "")]),
    }
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "LOCALLLM_CUDA_XSUM must be 0 or 1, got yes" in r.stdout, (r.stdout, r.stderr)
