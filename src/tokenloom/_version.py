"""The version of tokenloom's source (``tokenloom.__version__``), a leaf any module may
import without loading the package's re-exports."""

__version__ = "0.1.0"
