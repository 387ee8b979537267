"""The one compiled part: a logits row's sampling in C (core/engine/llama/fast_rows.py). It is
optional: where it cannot be built (no C compiler or Python headers), the install goes on and
numpy does the same work. Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "infertui.core.engine.llama._fast_rows",
            ["core/engine/llama/fast_rows.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
