# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The few API calls the DRA front end makes, over HTTP, for tests of the daemon process.

Serves GET of a ResourceClaim (from dra_node.Claims), GET of the Node, and LIST (field
selectors spec.nodeName and spec.driver), POST, PUT and DELETE of ResourceSlices, each
stored as sent with the metadata the API server adds (name from generateName, uid,
resourceVersion). It is a stand-in, not an API server: it validates nothing, drops no
field whose feature gate is off and checks no precondition or authorization. What only a
real API server shows (dropped fields, the Node authorizer) is checked on the lab.
kubeconfig() writes a kubeconfig for it, as the daemon reads the kubelet's.
"""

from __future__ import annotations

import copy
import http.server
import itertools
import json
import threading
import urllib.parse
import uuid as uuidlib

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
NODE_UID = "0b0e5a8e-1d7c-4d55-9f0e-6a7d2c1f3b44"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if url.path == SLICES:
            return self.answer(200, self.server.list_slices(urllib.parse.parse_qs(url.query)))
        if (
            parts[:3] == ["apis", "resource.k8s.io", "v1"]
            and len(parts) == 7
            and parts[5] == "resourceclaims"
        ):
            found = self.server.claims(parts[4], parts[6])
            return self.answer(200, found) if found else self.status(404, "NotFound")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            if parts[3] != self.server.node:
                return self.status(404, "NotFound")
            return self.answer(200, {"kind": "Node", "metadata": {"name": parts[3], "uid": NODE_UID}})
        return self.status(404, "NotFound")

    def do_POST(self):
        if self.path.split("?")[0] != SLICES:
            return self.status(404, "NotFound")
        return self.answer(201, self.server.create(self.body()))

    def do_PUT(self):
        name = self.slice_name()
        stored = self.server.replace(name, self.body()) if name else None
        return self.answer(200, stored) if stored else self.status(404, "NotFound")

    def do_DELETE(self):
        name = self.slice_name()
        gone = self.server.delete(name) if name else None
        return self.answer(200, gone) if gone else self.status(404, "NotFound")

    def slice_name(self):
        path = self.path.split("?")[0]
        return path[len(SLICES) + 1 :] if path.startswith(SLICES + "/") else None

    def body(self):
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

    def status(self, code, reason):
        return self.answer(code, {"kind": "Status", "status": "Failure", "reason": reason, "code": code})

    def answer(self, code, document):
        body = json.dumps(document).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        """Quiet: the tests say what went wrong."""


class ApiStandin(http.server.ThreadingHTTPServer):
    """Claims from a ClaimReader (dra_node.Claims), one Node, ResourceSlices in memory."""

    def __init__(self, claims, node):
        self.claims = claims
        self.node = node
        self._lock = threading.Lock()
        self._slices: dict[str, dict] = {}
        self._versions = itertools.count(1)
        self.writes = 0
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]

    def kubeconfig(self, path):
        """Write a kubeconfig for this server at path (JSON is YAML); return path."""
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "node", "user": {"token": "standin"}}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "node"}}],
            "current-context": "standin",
        }
        with open(path, "w") as handle:
            json.dump(document, handle)
        return path

    def slices(self):
        """The stored slices, by name."""
        with self._lock:
            return copy.deepcopy(self._slices)

    def wipe(self):
        """Delete every slice, as the kubelet does 30 s after the driver's last plugin went."""
        with self._lock:
            self._slices.clear()

    def list_slices(self, query):
        wanted = {}
        for term in ",".join(query.get("fieldSelector", [])).split(","):
            key, _, value = term.partition("=")
            if key:
                wanted[key.removeprefix("spec.")] = value
        with self._lock:
            items = [
                copy.deepcopy(s)
                for s in self._slices.values()
                if all(s["spec"].get(key) == value for key, value in wanted.items())
            ]
        return {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "items": items}

    def create(self, document):
        metadata = document.setdefault("metadata", {})
        with self._lock:
            self.writes += 1
            metadata["name"] = metadata.pop("generateName", "slice-") + uuidlib.uuid4().hex[:5]
            metadata["uid"] = str(uuidlib.uuid4())
            metadata["resourceVersion"] = str(next(self._versions))
            self._slices[metadata["name"]] = copy.deepcopy(document)
        return document

    def replace(self, name, document):
        with self._lock:
            if name not in self._slices:
                return None
            self.writes += 1
            document["metadata"]["uid"] = self._slices[name]["metadata"]["uid"]
            document["metadata"]["resourceVersion"] = str(next(self._versions))
            self._slices[name] = copy.deepcopy(document)
        return document

    def delete(self, name):
        with self._lock:
            self.writes += 1
            return self._slices.pop(name, None)
