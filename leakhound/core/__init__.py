"""The core operations: one function per thing leakhound does to a live worker.

Commands call these with keyword-only arguments and plain callables for progress and logging
(``progress(phase, done)``, ``log(line)``, ``note(line)``); nothing here imports typer or
rich, or knows how the result is shown. Commands reach ``leakhound.attach`` only through here.
"""
