#!/usr/bin/env python3
"""TensorBoard, the real client, reading a cutrain run's event files (for
tests/train/run/tensorboard_test.cpp). Writes one JSON object to OUT.

  tensorboard_client.py read RUN OUT        TensorBoard's own reader (EventAccumulator, every
                                            event kept): {"scalars": {tag: [[step, value]]},
                                            "texts": {tag: [[step, text]]}}
  tensorboard_client.py serve RUN OUT TAG.. a TensorBoard server on a loopback port (the
                                            folder loaded before it serves: --reload_task
                                            blocking), asked over HTTP for each tag's scalars
                                            (/data/plugin/scalars/scalars): {tag: [[step, value]]}
"""
import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request


def read(run):
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]}
    texts = {}
    for t in tags["tensors"]:
        texts[t] = [[e.step, e.tensor_proto.string_val[0].decode()] for e in acc.Tensors(t)]
    return {"scalars": scalars, "texts": texts}


def serve(run, tags):
    exe = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    server = subprocess.Popen(
        [exe, "--logdir", run, "--host", "127.0.0.1", "--port", "0", "--load_fast", "false",
         "--reload_task", "blocking", "--reload_interval", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url, seen = None, []
        for line in server.stderr:  # it says where it serves once the folder is loaded
            seen.append(line)
            m = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
            if m:
                url = m.group(1)
                break
        if url is None:
            sys.exit("tensorboard ended without serving:\n" + "".join(seen))
        out = {}
        for tag in tags:
            q = urllib.parse.urlencode({"run": ".", "tag": tag})
            with urllib.request.urlopen(f"{url}/data/plugin/scalars/scalars?{q}") as r:
                out[tag] = [[step, value] for _, step, value in json.load(r)]
        return out
    finally:
        server.kill()
        server.wait()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "read":
        answer = read(sys.argv[2])
    elif len(sys.argv) >= 5 and sys.argv[1] == "serve":
        answer = serve(sys.argv[2], sys.argv[4:])
    else:
        sys.exit(__doc__)
    with open(sys.argv[3], "w") as f:
        json.dump(answer, f)


if __name__ == "__main__":
    main()
