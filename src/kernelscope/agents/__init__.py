"""kernelscope for agents: ``kernelscope mcp`` (server.py, a Model Context Protocol server over a store) and the
JSON answers its tools give (tools.py). Sits just below the CLI: the CLI starts it; it reads analysis and
storage like the CLI does."""
