"""CUDA sources in the Bazel build: nvcc through a genrule, per .cu file.

`cuda_library` compiles each .cu file with the toolkit's nvcc (whole-program
compilation, no relocatable device code) into an object file and wraps the
objects in a cc_library that depends on @local_cuda//:cuda (cudart, cuBLAS).
In a CPU-only build (CUDA_ENABLED is False) it defines nothing: BUILD files
put targets that need CUDA under `if CUDA_ENABLED:`.

Target GPUs: --define=cuda_arch=90 (the default comes from
PSCLUSTER_CUDA_ARCH, see cuda_configure.bzl) builds sm_90 code plus compute_90
PTX, which newer GPUs JIT-compile; --define=cuda_arch=80,90,100 builds code
for each and PTX for the highest.
"""

load("@local_cuda//:defs.bzl", "CUDA_ARCH_DEFAULT", "CUDA_ENABLED", "NVCC")

def _gencode_flags(archs):
    caps = archs.split(",")
    for c in caps:
        if not c or not c[0].isdigit() or not (c.isdigit() or (c[:-1].isdigit() and c[-1].isalpha())):
            fail("--define=cuda_arch=%s: expected compute capabilities like 90 or 80,90,100" % archs)
    flags = []
    for i, c in enumerate(caps):
        if i == len(caps) - 1:
            flags.append("'-gencode=arch=compute_%s,code=[sm_%s,compute_%s]'" % (c, c, c))
        else:
            flags.append("'-gencode=arch=compute_%s,code=sm_%s'" % (c, c))
    return " ".join(flags)

def _cuda_gencode_impl(ctx):
    archs = ctx.var.get("cuda_arch", ctx.attr.default_archs)
    return [platform_common.TemplateVariableInfo({
        "CUDA_GENCODE": _gencode_flags(archs),
        "CUDA_ARCHS": archs,
    })]

# Provides $(CUDA_GENCODE) to genrules that list it in `toolchains`.
cuda_gencode = rule(
    implementation = _cuda_gencode_impl,
    attrs = {"default_archs": attr.string(mandatory = True)},
)

def cuda_library(name, srcs, hdrs = [], cu_hdrs = [], deps = [], visibility = None, testonly = False):
    """A cc_library built from .cu files.

    Args:
      name: the cc_library's name.
      srcs: .cu files, each compiled on its own.
      hdrs: the library's public headers (plain C++ that gcc can read).
      cu_hdrs: every other header the .cu files include from this
        workspace (labels of files or filegroups), so edits rebuild them.
      deps: cc_library deps of the wrapper (for its users).
      visibility: of the cc_library.
      testonly: of every target made.
    """
    if not CUDA_ENABLED:
        return
    objs = []
    for src in srcs:
        if not src.endswith(".cu"):
            fail("cuda_library %s: %s is not a .cu file" % (name, src))
        stem = src[:-len(".cu")]
        obj = "_cuda_objs/%s/%s.o" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem.replace("/", "_")),
            srcs = [src] + hdrs + cu_hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-std=c++17",
                "-O3",
                "-lineinfo",
                "-Xcompiler=-fPIC,-fno-omit-frame-pointer",
                "--Werror=cross-execution-space-call",
                "$(CUDA_GENCODE)",
                "'-DPSCLUSTER_CUDA_ARCHS=\"$(CUDA_ARCHS)\"'",
                "-I.",
                "-I$(GENDIR)",
                "-c",
                "$(location %s)" % src,
                "-o",
                "$@",
            ]),
            message = "nvcc %s" % src,
            toolchains = ["//third_party/cuda:gencode"],
            testonly = testonly,
            visibility = ["//visibility:private"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda"],
        visibility = visibility,
        testonly = testonly,
        # The objects hold kernel registrations run by static constructors.
        alwayslink = True,
    )
