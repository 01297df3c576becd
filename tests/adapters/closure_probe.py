"""Print, as JSON, the installed distributions (name -> version) a fresh interpreter imports to build the OpenEnv app
and play one episode in-process (code that fails, inspect_data, a checked submission), as the image's server does.
Run by test_openenv_packaging.py in a subprocess: argv[1] is a tasks.jsonl whose first task it plays."""

from __future__ import annotations

import importlib.metadata as md
import json
import sys

# what the image's command loads besides the app: uvicorn with the protocols it is told to use
import uvicorn.protocols.http.h11_impl  # noqa: F401
import uvicorn.protocols.websockets.websockets_impl  # noqa: F401

import components.sandbox.docker  # noqa: F401  (the image's default backend)
from components.adapters.asgi import settings_from_env
from components.adapters.openenv_app import create_server_app
from components.adapters.served import TaskBook
from components.adapters.session import EpisodeSession, env_action

settings, config = settings_from_env({"MEDGYM_TASKS": sys.argv[1], "MEDGYM_SANDBOX_BACKEND": "process"})
create_server_app(settings, config)
book = TaskBook(settings)
session = EpisodeSession(book, settings)
session.start(book.ids[0])
session.act(env_action("run_code", code="import pandas as pd\npd.read_csv('data/patients.csv').nosuchcolumn"))
session.act(env_action("inspect_data", path="data/pharmacy.db", column="drug", value="aspirin"))
session.act(env_action("submit_answer", answer="12.5"))
session.close()

owners = md.packages_distributions()
tops = {name.split(".")[0] for name in sys.modules} - set(sys.stdlib_module_names) - {"components", "tests"}
dists = {d for top in tops for d in owners.get(top, [])}
print(json.dumps({d: md.version(d) for d in sorted(dists, key=str.lower)}))
