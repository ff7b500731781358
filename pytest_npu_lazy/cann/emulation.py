"""The emulated NPU: which Ascend model it pretends to be, which calls it refuses, and its C sources.

``--npu-lazy-cann=emulate`` builds the same stub sonames as the host stub, but each is an
empty library that lists one more library in DT_NEEDED: the emulation, compiled from the
hand-written ``emulation.c`` (device discovery and initialisation, contexts, streams,
events, host-backed memory) plus generated C for every other CANN symbol torch_npu's
binaries name. A generated function either refuses (the call needs the device to
compute: one clear message naming the call) or reports that the call is not emulated
(ACL_ERROR_RT_FEATURE_NOT_SUPPORT). What emulation.c defines is read back from its
compiled form, never listed twice.

Everything lives in one library so the state (current device, live allocations) exists
once, and ``dlsym`` on any stub's handle (torch_npu loads many ACL functions that way)
finds the same functions through the stub's dependency.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .analysis import StubSpec
from .common import ENV_MODE, ENV_TRACE, CannError
from .elf import _shared_objects

EMULATION_SONAME = "libnpu_lazy_emulated_npu.so"
EMULATION_SOURCE = Path(__file__).with_name("emulation.c")
MODEL_HEADER = "npu_lazy_model.h"


@dataclass(frozen=True)
class NpuModel:
    """The Ascend model the emulation reports; every value says where it comes from (docs/emulated-npu.md)."""

    soc_name: str  # aclrtGetSocName; torch_npu maps it to its SocVersion enum (NpuVariables.cpp)
    cube_cores: int  # aclGetDeviceCapability(ACL_DEVICE_INFO_AI_CORE_NUM): torch.npu.get_device_properties().cube_core_num
    vector_cores: int  # ACL_DEVICE_INFO_VECTOR_CORE_NUM: .vector_core_num, .multi_processor_count
    l2_bytes: int  # ACL_DEVICE_INFO_L2_SIZE
    hbm_bytes: int  # aclrtGetMemInfo total, aclrtGetDeviceInfo(ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE)
    cann_version: str  # aclsysGetCANNVersion / aclsysGetVersionStr: decides torch_npu's version-gated paths
    device_count: int = 1

    def describe(self) -> str:
        return (f"{self.soc_name}: {self.cube_cores} cube cores, {self.vector_cores} vector cores, "
                f"{self.hbm_bytes >> 30} GiB HBM, {self.l2_bytes >> 20} MiB L2, CANN {self.cann_version} APIs")


# Ascend 910B3 (Atlas A2 training series): 20 AI (cube) and 40 vector cores as torch_npu reports them
# on that part, 64 GiB HBM, 192 MiB L2; CANN 9.1.0 is what COMPATIBILITY.md pairs with current torch_npu.
ASCEND_910B3 = NpuModel(
    soc_name="Ascend910B3", cube_cores=20, vector_cores=40, l2_bytes=192 << 20, hbm_bytes=64 << 30,
    cann_version="9.1.0",
)
MODEL = ASCEND_910B3

# Calls that need the device to compute, by what they would do. Matched against every CANN
# symbol torch_npu names (linked or looked up with dlsym); the first matching row wins.
REFUSED: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("kernel launch", re.compile(r"^(rtKernelLaunch\w*|aclrtLaunchKernel\w*)$")),
    ("kernel binary load", re.compile(r"^(rtDevBinaryRegister|rtFunctionRegister|aclrtBinaryLoad\w*"
                                      r"|aclrtBinaryGetFunction|aclrtGetFunctionAddr)$")),
    # aclnn* operators are looked up in libopapi.so, a library no stub provides: torch_npu then uses
    # the aclop path below, so they need no row (and 1,700 exports) of their own.
    ("operator execution", re.compile(r"^(aclopCompileAndExecute\w*|aclopExecute\w*)$")),
    ("collective communication", re.compile(r"^(Hccl\w+|rtGetC2cCtrlAddr|aclshmem\w*)$")),
    ("graph execution", re.compile(r"^(aclmdlRIExecute\w*|aclmdlExecute\w*|_ZN2ge7Session\d+RunGraph\w*"
                                   r"|_ZN2ge7Session\d+CompileGraph\w*)$")),
)

# What a call that is not emulated returns when its result is not an aclError (acl/acl_base.h,
# acl/acl_op.h): NULL for a handle, 0 for a count, ACL_DT_UNDEFINED / ACL_FORMAT_UNDEFINED (-1).
# torch_npu builds operator descriptors with these before it asks to execute the operator,
# which is refused; an error code read as a dimension count would make it loop for nothing.
NOT_ERROR_RESULTS = {
    "aclCreateTensorDesc": 0, "aclCreateDataBuffer": 0, "aclopCreateAttr": 0, "aclGetTensorDescNumDims": 0,
    "aclGetTensorDescType": -1, "aclGetTensorDescFormat": -1,
}
NOT_EMULATED = 207000  # ACL_ERROR_RT_FEATURE_NOT_SUPPORT
#: what a refused call returns (ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT), and every call on a lost device (emulation.c)
REFUSAL_RESULT = 507009

# Identifiers in torch_npu's binaries that may name a CANN function looked up with dlsym.
_CANDIDATE = re.compile(rb"\x00((?:acl|Hccl|rt)[A-Za-z]\w{2,80})(?=\x00)")  # a NUL may end one and start the next


def refusal(symbol: str) -> str | None:
    """What a call would need the device for, or None when the emulation may answer it."""
    return next((what for what, pattern in REFUSED if pattern.match(symbol)), None)


def _binaries(source: str) -> list[bytes]:
    """The contents of torch_npu's native libraries, from an installed package or a wheel."""
    if source.endswith(".whl"):
        with zipfile.ZipFile(source) as archive:
            return [archive.read(m) for m in archive.infolist() if ".so" in Path(m.filename).name and not m.is_dir()]
    directory = Path(source)
    paths = _shared_objects(directory) + _shared_objects(directory.parent / f"{directory.name}.libs")
    return [path.read_bytes() for path in paths]


def dlsym_refusals(spec: StubSpec) -> list[str]:
    """Compute calls torch_npu looks up at run time (strings in its binaries, not in its dynamic symbols)."""
    linked = {symbol for symbols in spec.libraries.values() for symbol in symbols}
    try:
        blobs = _binaries(spec.source)
    except OSError as exc:
        raise CannError(f"cannot read torch_npu's binaries in {spec.source} for the emulation: {exc}") from exc
    names = {match.group(1).decode() for blob in blobs for match in _CANDIDATE.finditer(blob)}
    return sorted(name for name in names - linked if refusal(name))


def model_header(model: NpuModel = MODEL) -> str:
    major, minor, patch = (re.findall(r"\d+", model.cann_version) + ["0", "0", "0"])[:3]
    return "\n".join([
        f"/* The emulated Ascend model: {model.describe()} (pytest_npu_lazy.cann.emulation.MODEL). */",
        f'#define NPU_LAZY_SOC_NAME "{model.soc_name}"',
        f"#define NPU_LAZY_DEVICE_COUNT {model.device_count}",
        f"#define NPU_LAZY_CUBE_CORES {model.cube_cores}",
        f"#define NPU_LAZY_VECTOR_CORES {model.vector_cores}",
        f"#define NPU_LAZY_L2_BYTES {model.l2_bytes}LL",
        f"#define NPU_LAZY_HBM_BYTES {model.hbm_bytes}ULL",
        f'#define NPU_LAZY_CANN_VERSION "{model.cann_version}"',
        f"#define NPU_LAZY_ACL_MAJOR {int(major)}",
        f"#define NPU_LAZY_ACL_MINOR {int(minor)}",
        f"#define NPU_LAZY_ACL_PATCH {int(patch)}",
        f'#define NPU_LAZY_TRACE_ENV "{ENV_TRACE}"',
        f'#define NPU_LAZY_MODE_ENV "{ENV_MODE}"',
        "",
    ])


_GENERATED_PRELUDE = """\
/* Every other CANN symbol torch_npu {version} names, for the emulated NPU (pytest-npu-lazy).
 * (emulation.c defines the emulated ones.) REFUSE: the call needs the device to compute;
 * UNSUPPORTED: the emulation does not model it. */
long npu_lazy_emulation_refuse(const char *name, const char *what);
long npu_lazy_emulation_unsupported(const char *name, long result);
#define REFUSE(id, symbol, what) \\
    long id(void) __asm__(symbol); \\
    long id(void) {{ return npu_lazy_emulation_refuse(symbol, what); }}
#define UNSUPPORTED(id, symbol, result) \\
    long id(void) __asm__(symbol); \\
    long id(void) {{ return npu_lazy_emulation_unsupported(symbol, result); }}
#define DATA(id, symbol) \\
    char id[{data_bytes}] __asm__(symbol) __attribute__((aligned(64)));
#define TLS_DATA(id, symbol) \\
    __thread char id[{data_bytes}] __asm__(symbol) __attribute__((aligned(64)));

"""


def generated_source(spec: StubSpec, extra_refusals: list[str], emulated: set[str], data_bytes: int) -> str:
    """Every symbol of the spec that emulation.c leaves out, and refusals for the calls found by dlsym_refusals()."""
    lines = [_GENERATED_PRELUDE.format(version=spec.torch_npu_version or "(unknown version)", data_bytes=data_bytes)]
    symbols = sorted(({s for symbols in spec.libraries.values() for s in symbols} | set(extra_refusals)) - emulated)
    for index, symbol in enumerate(symbols):
        kind = spec.data_symbols.get(symbol, "func")
        what = refusal(symbol)
        if kind == "object":
            lines.append(f'DATA(npu_lazy_data_{index}, "{symbol}")')
        elif kind == "tls":
            lines.append(f'TLS_DATA(npu_lazy_data_{index}, "{symbol}")')
        elif what:
            lines.append(f'REFUSE(npu_lazy_refuse_{index}, "{symbol}", "{what}")')
        else:
            result = NOT_ERROR_RESULTS.get(symbol, NOT_EMULATED)
            lines.append(f'UNSUPPORTED(npu_lazy_unsupported_{index}, "{symbol}", {result}L)')
    return "\n".join(lines) + "\n"


def emulation_key(spec: StubSpec) -> str:
    """Cache key of an emulation build: never the stub's, and new whenever the C or the model changes."""
    payload = hashlib.sha256()
    for part in (spec.key(), EMULATION_SOURCE.read_text(), model_header(), repr(REFUSED), repr(asdict(MODEL))):
        payload.update(part.encode() + b"\0")
    return "emulated-" + spec.key().removeprefix("cann-").rsplit("-", 1)[0] + "-" + payload.hexdigest()[:16]
