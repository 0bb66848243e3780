"""A child forked from a process with the in-process agent closes its copies of the agent's
sockets (payload/agent_server.py): the agent's thread does not come along, and the child's copy of
the listening socket would keep it looking served once the parent is gone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD_REPORT = """
import json, os, socket, sys
from leakhound.payload import agent_server as agent

path = agent.start()
listening = agent._sockets[0]
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, json.dumps({"closed": listening.fileno() == -1, "left": len(agent._sockets)}).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 4096))
os.waitpid(pid, 0)
child["parent_listens"] = listening.fileno() != -1
probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
agent.connect(probe, path)
probe.close()
print(json.dumps(child))
"""


def test_a_forked_child_closes_its_copies_of_the_agents_sockets(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD_REPORT], capture_output=True, text=True, timeout=60,
                         env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"closed": True, "left": 0, "parent_listens": True}
