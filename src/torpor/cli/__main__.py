"""``python -m torpor.cli``: the ``torpor`` command."""

from . import main

if __name__ == "__main__":
    main()
