"""The one compiled part: the host's per-token loops in C (core/engine/llama/fast_rows.py, a
logits row's sampling; lone_run.py, a lone stream's decode loop). It is optional: where it
cannot be built (no C compiler or Python headers), the install goes on and Python does the
same work. Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "infertui.core.engine.llama._hot_loops",
            [f"core/engine/llama/{name}.c" for name in ("hot_loops", "fast_rows", "lone_run")],
            depends=["core/engine/llama/hot_loops.h"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
