"""Makes the tests exercise this working tree, never an installed copy."""

import _worktree  # noqa: F401
