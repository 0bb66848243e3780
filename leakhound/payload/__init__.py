"""Code that runs inside the target process. Standard library only, Python 3.8+.

Nothing here may import the CLI's dependencies (typer, rich, psutil) or other leakhound
packages: the debugger method copies this folder into a private directory and loads it in
an interpreter that does not have leakhound installed.
"""
