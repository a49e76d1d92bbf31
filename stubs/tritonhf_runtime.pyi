# Each served model carries tritonhf/runtime.py as tritonhf_runtime.py (copied beside model.py):
# for mypy over the templates, the copy is the package's module.
from tritonhf.runtime import *  # noqa: F403
