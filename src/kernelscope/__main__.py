"""``python -m kernelscope``: the same command line as the ``kernelscope`` console script."""

from .cli import main

if __name__ == "__main__":
    main()
