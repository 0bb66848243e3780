"""leakhound: find what retains a live Python worker's memory, and prove the fix.

This package's top level imports nothing heavy: ``leakhound.payload`` and
``leakhound.simulate`` run inside target processes with the standard library only.
"""

__version__ = "0.1.0"
