"""The Kubernetes manifests of launcher/k8s/ (no cluster): every document validates against the
Kubernetes API schema offline (launcher/k8s/validate, the npm package kubernetes-models), a
deliberately broken manifest fails that check naming the bad field, every flag the pods pass
exists in the binary that gets it, and the pieces agree (the shard count, the coordinator's
Service and ports). With kubectl on the PATH, the kustomization is rendered too and its output
(the generated token Secret included) validated."""
import filecmp
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN, ROOT, RunDirTest, skip_or_fail

K8S = os.path.join(ROOT, "launcher", "k8s")
VALIDATE = os.path.join(K8S, "validate")
MANIFESTS = ["job-configmap.yaml", "coordinator.yaml", "shards.yaml", "workers.yaml"]


def install_validator():
    """npm ci of launcher/k8s/validate into the build tree (beside EPS_BIN), redone only when the lock
    file changed; returns the folder holding validate.js and its node_modules."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise AssertionError("node and npm are missing (scripts/setup.sh installs them)")
    dest = os.path.join(os.path.dirname(os.path.abspath(BIN)), "k8s-validate")
    lock = os.path.join(VALIDATE, "package-lock.json")
    fresh = os.path.exists(os.path.join(dest, "node_modules")) and os.path.exists(
        os.path.join(dest, "package-lock.json")) and filecmp.cmp(lock, os.path.join(dest, "package-lock.json"),
                                                                 shallow=False)
    os.makedirs(dest, exist_ok=True)
    for f in ("package.json", "package-lock.json", "validate.js"):
        shutil.copy(os.path.join(VALIDATE, f), os.path.join(dest, f))
    if not fresh:
        p = subprocess.run(["npm", "ci", "--prefer-offline", "--no-audit", "--no-fund"], cwd=dest,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        assert p.returncode == 0, f"npm ci failed:\n{p.stdout}"
    return dest


class K8sManifests(RunDirTest):
    @classmethod
    def setUpClass(cls):
        cls.validator = install_validator()

    def validate(self, *paths, stdin=None):
        p = subprocess.run(["node", os.path.join(self.validator, "validate.js"), *paths], input=stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    def load(self, name):
        """The YAML documents of launcher/k8s/<name>, read by the validator's js-yaml, as Python objects."""
        p = subprocess.run(["node", "-e", "const y = require('js-yaml'), fs = require('fs');"
                            "console.log(JSON.stringify(y.loadAll(fs.readFileSync(process.argv[1], 'utf8'))))",
                            os.path.join(K8S, name)], cwd=self.validator, stdout=subprocess.PIPE, text=True,
                           timeout=60, check=True)
        return [d for d in json.loads(p.stdout) if d]

    def objects(self):
        return {(d["kind"], d["metadata"]["name"]): d for name in MANIFESTS for d in self.load(name)}

    def test_every_manifest_validates(self):
        rc, out, err = self.validate(K8S)
        self.assertEqual(rc, 0, out + err)
        for what in ["ConfigMap/eps-job", "Deployment/eps-coordinator", "Service/eps-coordinator",
                     "PersistentVolumeClaim/eps-coordinator", "Service/eps-shard", "StatefulSet/eps-shard",
                     "PriorityClass/eps-worker-low", "Deployment/eps-worker", "Kustomization"]:
            self.assertIn(what, out)

    def test_a_broken_manifest_fails_naming_the_field(self):
        d = self.run_dir("broken")
        with open(os.path.join(K8S, "workers.yaml")) as f:
            text = f.read()
        broken = text.replace("replicas: 2", 'replicas: "two"').replace("containerPort: 9100",
                                                                         'containerPort: "metrics"')
        self.assertNotEqual(broken, text)
        with open(os.path.join(d, "workers.yaml"), "w") as f:
            f.write(broken)
        rc, out, err = self.validate(os.path.join(d, "workers.yaml"))
        self.assertEqual(rc, 1, out + err)
        self.assertIn("Deployment/eps-worker: /spec/replicas must be integer", err)
        self.assertIn("/spec/template/spec/containers/0/ports/0/containerPort must be integer", err)
        self.assertIn("ok   ", out)  # the PriorityClass in the same file is fine
        # An unknown kind, a missing required field, and a kustomization naming a missing file fail too.
        rc, _, err = self.validate("-", stdin="apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: x}\n")
        self.assertEqual(rc, 1)
        self.assertIn("no Deploymnet in API apps/v1", err)
        rc, _, err = self.validate("-", stdin="apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\n"
                                   "spec: {serviceName: x}\n")
        self.assertEqual(rc, 1)
        self.assertIn("/spec must have required property", err)
        with open(os.path.join(d, "kustomization.yaml"), "w") as f:
            f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [gone.yaml]\n")
        rc, _, err = self.validate(os.path.join(d, "kustomization.yaml"))
        self.assertEqual(rc, 1)
        self.assertIn("'gone.yaml' does not exist", err)

    def test_every_flag_exists_in_its_binary(self):
        objs = self.objects()
        known = {}
        for b in ("coordinator", "shard", "worker"):
            p = subprocess.run([os.path.join(BIN, b), "--helpfull"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=60)
            known[b] = set(re.findall(r"^\s+-(\w+) \(", p.stdout, re.M))
            self.assertIn("metrics_port", known[b], f"{b} --helpfull:\n{p.stdout[:2000]}")
        job_flags = objs[("ConfigMap", "eps-job")]["data"]["job.flags"]
        checked = 0
        for kind, name in [("Deployment", "eps-coordinator"), ("StatefulSet", "eps-shard"),
                           ("Deployment", "eps-worker")]:
            for c in objs[(kind, name)]["spec"]["template"]["spec"]["containers"]:
                line = " ".join(c.get("command", []) + c.get("args", []))
                m = re.search(r"/opt/elasticps/bin/(\w+)", line)
                self.assertIsNotNone(m, f"{name}: no binary in {line}")
                binary = m.group(1)
                text = line[m.end():] + ("\n" + job_flags if binary == "coordinator" else "")
                for flag in re.findall(r"--(\w+)", text):
                    self.assertIn(flag, known[binary], f"{name}: {binary} has no --{flag}")
                    checked += 1
        self.assertGreater(checked, 20)

    def test_the_pieces_agree(self):
        objs = self.objects()
        job = dict(re.findall(r"^--(\w+)=(.*)$", objs[("ConfigMap", "eps-job")]["data"]["job.flags"], re.M))
        shards = objs[("StatefulSet", "eps-shard")]
        self.assertEqual(int(job["shards"]), shards["spec"]["replicas"], "--shards and the StatefulSet's replicas")
        self.assertEqual(shards["spec"]["serviceName"], "eps-shard")
        self.assertEqual(objs[("Service", "eps-shard")]["spec"]["clusterIP"], "None")
        coord_port = {p["name"]: p["port"] for p in objs[("Service", "eps-coordinator")]["spec"]["ports"]}["zmq"]
        coord = objs[("Deployment", "eps-coordinator")]["spec"]["template"]["spec"]
        self.assertIn(f"--bind=tcp://0.0.0.0:{coord_port}", coord["containers"][0]["args"][0])
        for kind, name in [("StatefulSet", "eps-shard"), ("Deployment", "eps-worker")]:
            spec = objs[(kind, name)]["spec"]["template"]["spec"]
            line = " ".join(spec["containers"][0].get("command", []) + spec["containers"][0].get("args", []))
            self.assertIn(f"--coordinator=tcp://eps-coordinator:{coord_port}", line, name)
            self.assertIn("--token_file=/etc/elasticps/token/token", line, name)
            self.assertIn("eps-token", json.dumps(spec["volumes"]), name)
        shard = shards["spec"]["template"]["spec"]["containers"][0]
        zmq = {p["name"]: p["containerPort"] for p in shard["ports"]}["zmq"]
        self.assertIn(f'--bind="tcp://${{POD_IP}}:{zmq}"', shard["args"][0])
        self.assertEqual(shards["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "data")
        workers = objs[("Deployment", "eps-worker")]["spec"]["template"]["spec"]
        self.assertEqual(workers["priorityClassName"], "eps-worker-low")
        self.assertLess(objs[("PriorityClass", "eps-worker-low")]["value"], 0)
        self.assertNotIn("lifecycle", workers["containers"][0])  # SIGTERM is the leave: no preStop
        self.assertGreaterEqual(workers["terminationGracePeriodSeconds"], 30)

    def test_the_kustomization_renders_and_validates(self):
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            skip_or_fail(self, "no kubectl (kubernetes-client): the kustomization is only checked for its resources")
        d = os.path.join(self.tmp, "k8s")
        shutil.copytree(K8S, d, ignore=shutil.ignore_patterns("validate", "token"))
        with open(os.path.join(d, "token"), "w") as f:
            f.write("0123456789abcdef\n")
        p = subprocess.run([kubectl, "kustomize", d], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        rc, out, err = self.validate("-", stdin=p.stdout)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("Secret/eps-token", out)
        self.assertEqual(out.count("ok   "), 9, out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
