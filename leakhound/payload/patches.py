"""Live fixes applied inside the target. Filled in by the patch issue."""


def applied():
    return []


def handle(request):
    raise ValueError("no patches available in this payload version")
