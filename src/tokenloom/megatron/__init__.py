"""tokenloom as a drop-in for Megatron-LM's data pipeline: one line, or one launcher.

::

    import tokenloom.megatron; tokenloom.megatron.install()   # before megatron's data imports
    python -m tokenloom.megatron pretrain_gpt.py ARGS...       # or: an unmodified script
    torchrun --nproc-per-node 8 -m tokenloom.megatron pretrain_gpt.py ARGS...

After :func:`install`, ``import megatron.core.datasets.gpt_dataset`` (and every other
module in :data:`MODULES`) gives tokenloom's implementation, whether or not
megatron-core is installed; the rest of megatron-core (models, transformer,
parallel_state, the datasets tokenloom does not implement) is untouched.

The data path, as a Megatron-LM script sees it::

    megatron.core.datasets.X ──(import hook, importer.py)──▶ tokenloom.megatron.datasets.X
        config classes      ── Megatron's dataclasses and fields, tokenloom's checks
        GPTDataset, ...     ── tokenloom's datasets, samples as torch tensors (tensors.py),
                               subclass hooks called as megatron-core calls them
        errors              ── tokenloom's messages, also AssertionError/IndexError/
                               ValueError where megatron-core raises those (errors.py)

tokenloom's own API (``import tokenloom``) is unchanged: numpy samples, tokenloom's
errors. Only the ``megatron.core.datasets`` names behave like megatron-core.
"""

from __future__ import annotations

import logging
import sys

from tokenloom.megatron.importer import MODULES, Redirect

__all__ = ["MODULES", "install", "installed", "uninstall"]

logger = logging.getLogger(__name__)


def _current() -> Redirect | None:
    for finder in sys.meta_path:
        if isinstance(finder, Redirect):
            return finder
    return None


def installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return _current() is not None


def install() -> None:
    """Make ``megatron.core.datasets``'s modules resolve to tokenloom (idempotent).

    Call it before Megatron's data modules are imported. Modules of
    ``megatron.core.datasets`` imported earlier are replaced in ``sys.modules`` too, but
    names already bound by ``from ... import`` elsewhere keep megatron-core's objects:
    such a module is named in a warning.
    """
    if installed():
        return
    redirect = Redirect()
    redirect.insert()
    if redirect.replaced:
        logger.warning(
            "tokenloom.megatron.install(): %s were imported before install(); names "
            "imported from them earlier still refer to megatron-core's objects. Call "
            "install() first (or use `python -m tokenloom.megatron SCRIPT`).",
            ", ".join(sorted(redirect.replaced)),
        )


def uninstall() -> None:
    """Undo :func:`install`: megatron-core's own modules resolve again (harmless if not
    installed)."""
    redirect = _current()
    while redirect is not None:
        redirect.remove()
        redirect = _current()
