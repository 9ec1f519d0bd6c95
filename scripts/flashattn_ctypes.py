"""The C API of libflashattn (include/flashattn/flashattn.h) through ctypes, for scripts that time it
beside other libraries on the same buffers (scripts/bench_interleaved.py). Only the dense forward
and backward. The structures mirror the header; load() checks their sizes against the struct_size
that flashattn_*_params_init sets, so that a header change that this file misses fails loudly."""
import ctypes

MAX_RANK = 5
DTYPES = {"f32": 1, "f16": 2, "bf16": 3}
BACKENDS = {"auto": 0, "cpu": 1, "cpu-reference": 2, "cuda": 3, "cuda-sm80": 5}


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_RANK), ("stride", ctypes.c_int64 * MAX_RANK)]


class Exec(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("device", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                ("stream", ctypes.c_void_p), ("workspace", ctypes.c_void_p), ("workspace_size", ctypes.c_size_t)]


class AttnOptions(ctypes.Structure):
    _fields_ = [("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int32), ("window_left", ctypes.c_int64),
                ("window_right", ctypes.c_int64), ("softcap", ctypes.c_float), ("alibi_slopes", Tensor),
                ("dropout_p", ctypes.c_float), ("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64)]


class FwdParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("q", Tensor), ("k", Tensor), ("v", Tensor), ("out", Tensor),
                ("lse", Tensor), ("cu_seqlens_q", Tensor), ("cu_seqlens_k", Tensor), ("seqused_k", Tensor),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64), ("cache_seqlens", Tensor),
                ("block_table", Tensor), ("k_new", Tensor), ("v_new", Tensor), ("rotary_cos", Tensor),
                ("rotary_sin", Tensor), ("rotary_interleaved", ctypes.c_int32), ("opts", AttnOptions),
                ("exec", Exec), ("num_splits", ctypes.c_int32)]


class BwdParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("q", Tensor), ("k", Tensor), ("v", Tensor), ("out", Tensor),
                ("dout", Tensor), ("lse", Tensor), ("dq", Tensor), ("dk", Tensor), ("dv", Tensor),
                ("cu_seqlens_q", Tensor), ("cu_seqlens_k", Tensor), ("seqused_k", Tensor),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64), ("deterministic", ctypes.c_int32),
                ("opts", AttnOptions), ("exec", Exec)]


def tensor(data_ptr, dtype, shape, stride):
    """A strided view (strides in elements, the last one 1)."""
    t = Tensor()
    t.data, t.dtype, t.rank = data_ptr, DTYPES[dtype], len(shape)
    for i, (n, s) in enumerate(zip(shape, stride)):
        t.shape[i], t.stride[i] = n, s
    return t


class Library:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        for name, params in (("fwd", FwdParams), ("bwd", BwdParams)):
            getattr(lib, f"flashattn_{name}_params_init").argtypes = [ctypes.POINTER(params)]
            getattr(lib, f"flashattn_{name}").argtypes = [ctypes.POINTER(params)]
            getattr(lib, f"flashattn_{name}_workspace_size").argtypes = [ctypes.POINTER(params),
                                                                         ctypes.POINTER(ctypes.c_size_t)]
            probe = params()
            getattr(lib, f"flashattn_{name}_params_init")(ctypes.byref(probe))
            if probe.struct_size != ctypes.sizeof(params):
                raise RuntimeError(f"flashattn_{name}_params: {probe.struct_size} bytes in the library, "
                                   f"{ctypes.sizeof(params)} here: {__file__} does not match the header")
        lib.flashattn_last_error.restype = ctypes.c_char_p
        self.lib = lib

    def params(self, direction):
        p = FwdParams() if direction == "fwd" else BwdParams()
        getattr(self.lib, f"flashattn_{direction}_params_init")(ctypes.byref(p))
        return p

    def workspace_size(self, direction, p):
        size = ctypes.c_size_t(0)
        self.check(getattr(self.lib, f"flashattn_{direction}_workspace_size")(ctypes.byref(p), ctypes.byref(size)))
        return size.value

    def run(self, direction, p):
        self.check(getattr(self.lib, f"flashattn_{direction}")(ctypes.byref(p)))

    def check(self, status):
        if status != 0:
            raise RuntimeError(f"flashattn: status {status}: {self.lib.flashattn_last_error().decode()}")
