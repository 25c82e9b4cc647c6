"""A Ray driver for tests/test_launcher_ray.py, run as a child so Ray never lives in the test process.

``python -m tests.ray_driver ROOT`` starts a local cluster (2 CPUs, 2 GPUs) whose
workers discover the fake machine under ROOT (``NUMABIND_FSROOT`` in the
runtime environment) and bind themselves through numabind's setup hook, runs
GPU actors, GPU tasks and actors decorated with ``bind_actor``, shuts the
cluster down and prints one JSON object with what every worker reported.
(Ray leaves threads and a SIGTERM handler behind in a driver process even
after ``ray.shutdown()``.)
"""

from __future__ import annotations

import json
import os
import sys

TIMEOUT = 180


def main(root: str) -> int:
    os.environ["RAY_AUTH_MODE"] = "disabled"         # a throwaway local cluster: no token written to $HOME
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    import ray

    from numabind.integrations import ray as numa_ray

    def probe() -> dict:
        report = numa_ray.last_report()
        return {"gpus": [str(g) for g in ray.get_gpu_ids()], "cpus": sorted(os.sched_getaffinity(0)),
                "bound": None if report is None else sorted(report.applied.cpus), "pid": os.getpid()}

    @ray.remote(num_gpus=1)
    class Plain:
        """No decorator: only the setup hook binds it."""

        def probe(self) -> dict:
            return probe()

    @ray.remote(num_gpus=1)
    @numa_ray.bind_actor(mode="socket", policy=None)
    class Socketed:
        """Its own plan: the package of its GPU (both fake nodes), wider than the hook's node plan."""

        def __init__(self, tag: str) -> None:
            self.tag = tag

        def probe(self) -> dict:
            report = self.numabind_report()
            return {**probe(), "tag": self.tag,
                    "actor_bound": None if report is None else sorted(report.applied.cpus)}

    @ray.remote(num_gpus=1)
    def gpu_task() -> dict:
        return probe()

    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = numa_ray.runtime_env(mode="node", policy=None,
                               env_vars={"NUMABIND_FSROOT": root, "PYTHONPATH": tests_dir})
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, runtime_env=env, logging_level="ERROR")
    out: dict = {"ray": ray.__version__}
    try:
        actors = [Plain.remote() for _ in range(2)]          # alive together: one GPU each
        out["actors"] = ray.get([a.probe.remote() for a in actors], timeout=TIMEOUT)
        for a in actors:
            ray.kill(a)
        out["tasks"] = ray.get([gpu_task.remote() for _ in range(3)], timeout=TIMEOUT)
        decorated = [Socketed.remote(f"a{i}") for i in range(2)]
        out["decorated"] = ray.get([a.probe.remote() for a in decorated], timeout=TIMEOUT)
        for a in decorated:
            ray.kill(a)
    finally:
        ray.shutdown()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
