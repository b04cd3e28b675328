#!/usr/bin/env python3
"""Checks the manifests in deploy/ without a cluster.

    python3 deploy/validate.py [FILE_OR_DIR...]     (default: every *.yaml in deploy/)

Exit 0 when every document passes, 1 with one line per problem otherwise.

1. Every custom resource (TrainJob, ClusterTrainingRuntime, TrainingRuntime,
   JobSet, Volcano Job) is validated with python3-jsonschema against its CRD's
   openAPIV3Schema, copied unchanged into deploy/schemas/ (see its README).
   Like `kubectl apply` with strict field validation (kubectl's default), a
   field the schema does not declare is an error, not silently pruned.
   CEL rules (x-kubernetes-validations) are not evaluated.
2. Core objects (Deployment, StatefulSet, Job, Service, ConfigMap) are checked
   for the fields these manifests use: required fields, names, selectors,
   named ports, a StatefulSet's Service and claim templates.
3. Every pod template that runs trainlet is checked against trainlet's own
   rules, read from the sources so that they cannot drift:
   - terminationGracePeriodSeconds at least GRACE_MARGIN_S above the grace
     period it passes (--grace-period, TRAINLET_GRACE_PERIOD, else the default
     in config/run_config.cc);
   - podFailurePolicy only with restartPolicy: Never, every rule naming a real
     container, and its exit codes within the contract of common/exit_codes.h
     (docs/exit-codes.md): FailJob only on codes retrying cannot fix, and on
     at least usage, rejected and config; Ignore only on "another node failed" and "node unhealthy";
     a JobSet whose Jobs can FailJob ends on PodFailurePolicy instead of
     restarting; Volcano's exit-code policies likewise;
   - the init-container pattern: the training container runs trainlet from an
     emptyDir that an init container of the trainlet image copied it into;
   - the values that must agree across objects: TRAINLET_NNODES and
     parallelism, a TrainJob and its runtime (trainer env and command merged
     into the node container), agents and their standalone coordinator (and a
     bare TRAINLET_COORDINATOR name must be a Service here);
   - TRAINLET_* names and values against the option tables in cmd/, config/
     and agent/ and the names the sources read; gRPC probes on the health
     port; the token file inside a mounted Secret;
   - an elastic Job (TRAINLET_NNODES=MIN:MAX, completions > MIN) succeeds with
     MIN pods (Job successPolicy); a standalone coordinator runs in a Job
     that does not retry once the job is over, never in a Deployment.
"""
import difflib
import os
import re
import sys

import jsonschema
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCHEMA_DIR = os.path.join(HERE, "schemas")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# terminationGracePeriodSeconds must exceed trainlet's grace period by this
# much: after the grace period the agent SIGKILLs what is left, reaps it,
# tells the coordinator and exits (docs/kubernetes.md).
GRACE_MARGIN_S = 5
K8S_DEFAULT_TERMINATION_GRACE_S = 30
TRAINLET_IMAGE = re.compile(r"^(.*/)?trainlet/trainlet(:[\w][\w.-]*)?(@sha256:[0-9a-f]{64})?$")
AGENT_COMMANDS = ("run", "mpi-launcher", "mpi-worker")
SERVER_COMMANDS = ("coordinator", "controller")
KNOWN_CORE = {("v1", "ConfigMap"), ("v1", "Service"), ("v1", "Secret"), ("apps/v1", "Deployment"),
              ("apps/v1", "StatefulSet"), ("batch/v1", "Job")}
VOLCANO_ACTIONS = {"AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob",
                   "CompleteJob", "ResumeJob"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")


# --- The contract, read from the sources --------------------------------------------------------

def exit_codes(repo=REPO):
    """common/exit_codes.h's enum: {'kExitUsage': 64, ...}."""
    with open(os.path.join(repo, "common", "exit_codes.h")) as f:
        text = f.read()
    codes = {m.group(1): int(m.group(2)) for m in re.finditer(r"\b(kExit\w+)\s*=\s*(\d+)", text)}
    needed = ["kExitUsage", "kExitUnavailable", "kExitPeerFailed", "kExitRejected", "kExitConfig",
              "kExitRestartsExhausted", "kExitNotExecutable", "kExitNotFound"]
    missing = [n for n in needed if n not in codes]
    if missing:
        raise RuntimeError(f"common/exit_codes.h: no {', '.join(missing)}; update deploy/validate.py")
    return codes


class Contract:
    """Which exit codes a failure policy may treat how (docs/exit-codes.md)."""

    def __init__(self, repo=REPO):
        c = exit_codes(repo)
        # Retrying cannot help: a bad flag, a wrong token, an inconsistent job,
        # the restart budget spent, a COMMAND that cannot run.
        self.never_retry = {c["kExitUsage"], c["kExitRejected"], c["kExitConfig"],
                            c["kExitRestartsExhausted"], c["kExitNotExecutable"], c["kExitNotFound"]}
        # A policy that ends the job on configuration errors must name these.
        self.must_fail = {c["kExitUsage"], c["kExitRejected"], c["kExitConfig"]}
        # Not this pod's fault: another node failed and this one was stopped;
        # or this node's GPUs are unusable and a pod elsewhere should replace it.
        self.ignorable = {c["kExitPeerFailed"], c["kExitNodeUnhealthy"]}
        # A standalone coordinator's exit ends the job: 0 it succeeded, 75 it
        # failed, 79 restarts exhausted (cmd/standalone_coordinator.cc). A
        # new one would remember nothing, so its Job must not retry these.
        self.coordinator_must_fail = {c["kExitUsage"], c["kExitConfig"], c["kExitPeerFailed"],
                                      c["kExitRestartsExhausted"]}
        self.coordinator_may_fail = self.never_retry | self.coordinator_must_fail
        self.default_grace_s = default_grace_period_s(repo)
        self.options = OptionTables(repo)
        self.metrics = served_metrics(repo)


def served_metrics(repo=REPO):
    """The metric names the controller's /metrics serves, read from the renderer
    (controller/views.cc: each family is named once in a string literal)."""
    with open(os.path.join(repo, "controller", "views.cc")) as f:
        names = set(re.findall(r'"(trainlet_[a-z_]+)"', f.read()))
    if "trainlet_job_info" not in names:
        raise RuntimeError("controller/views.cc: no trainlet_job_info; update deploy/validate.py")
    return names


def parse_duration_s(text):
    """trainlet's duration syntax (docs/configuration.md): 30s, 500ms, 2m, 1h30m, 30, 1.5."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|ns|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def default_grace_period_s(repo=REPO):
    """--grace-period's default, from the option table in config/run_config.cc."""
    with open(os.path.join(repo, "config", "run_config.cc")) as f:
        m = re.search(r'\{"grace-period",\s*OptionKind::kDuration,\s*"DURATION",\s*"([^"]+)"', f.read())
    if not m:
        raise RuntimeError("config/run_config.cc: no grace-period option; update deploy/validate.py")
    return parse_duration_s(m.group(1))


# The default is a string literal, or absl::StrCat(...) of one (its first
# piece) or of a named constant first (the option table is the one source of
# a default; docs/configuration.md): the constant's value stands for it.
OPTION_SPEC = re.compile(r'\{"([a-z][a-z0-9-]*)",\s*OptionKind::(k\w+),\s*"([^"]*)",\s*'
                         r'(?:"([^"]*)"|absl::StrCat\((?:(k\w+)|"([^"]*)"))')
# Where the option tables are (each command's own, and the shared ones).
OPTION_DIRS = ("cmd", "config", "agent")
SOURCE_DIRS = ("cmd", "config", "agent", "progress", "common", "rendezvous", "launcher", "mpi",
               "topology")


class OptionTables:
    """trainlet's options, read from the option tables in cmd/, config/ and agent/, and the
    TRAINLET_* variables the sources read by name (docs/configuration.md)."""

    def __init__(self, repo=REPO):
        self.specs = {}  # name -> [(file, kind, value_name, default_text)]
        for d in OPTION_DIRS:
            for name in sorted(os.listdir(os.path.join(repo, d))):
                if not name.endswith(".cc") or name.endswith("_test.cc"):
                    continue
                with open(os.path.join(repo, d, name)) as f:
                    for m in OPTION_SPEC.finditer(f.read()):
                        default = (self.constant(repo, m.group(5)) if m.group(5) is not None
                                   else m.group(4) if m.group(4) is not None else m.group(6))
                        self.specs.setdefault(m.group(1), []).append(
                            (name, m.group(2), m.group(3), default))
        needed = ["grace-period", "health-port", "port", "token-file", "nnodes", "nproc-per-node"]
        missing = [n for n in needed if n not in self.specs]
        if missing:
            raise RuntimeError(f"cmd/, config/, agent/: no option {', '.join(missing)}; "
                               "update deploy/validate.py")
        self.env_names = {env_name(n) for n in self.specs}
        for d in SOURCE_DIRS:
            for root, _, files in os.walk(os.path.join(repo, d)):
                if os.path.basename(root) == "testing":
                    continue
                for f in files:
                    if f.endswith((".cc", ".h")) and "_test." not in f:
                        with open(os.path.join(root, f), errors="replace") as fh:
                            self.env_names |= set(re.findall(r'"(TRAINLET_[A-Z0-9_]+)"', fh.read()))

    @staticmethod
    def constant(repo, const_name):
        """The value of `inline constexpr ... kName = VALUE;` in the option headers, as text."""
        for d in OPTION_DIRS:
            for name in sorted(os.listdir(os.path.join(repo, d))):
                if name.endswith(".h"):
                    with open(os.path.join(repo, d, name)) as f:
                        m = re.search(r"\b%s\s*=\s*([^;]+);" % re.escape(const_name), f.read())
                    if m:
                        return m.group(1).strip().strip('"')
        raise RuntimeError(f"{const_name}: no such constant in {', '.join(OPTION_DIRS)}; "
                           "update deploy/validate.py")

    def spec(self, name, source):
        """(kind, value_name, default_text) of option `name` in `source` (a file name)."""
        for f, kind, value_name, default in self.specs.get(name, []):
            if f == source:
                return kind, value_name, default
        raise RuntimeError(f"{source}: no option {name}; update deploy/validate.py")

    def default_int(self, name, source):
        m = re.match(r"\d+", self.spec(name, source)[2])
        if not m:
            raise RuntimeError(f"{source}: --{name}'s default is not a number; update deploy/validate.py")
        return int(m.group(0))

    def problem(self, var, value):
        """Why TRAINLET_* `var` = `value` would be refused, or None."""
        if var not in self.env_names:
            close = difflib.get_close_matches(var, sorted(self.env_names), 1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"{var} is no TRAINLET_* variable trainlet reads{hint}; it would be ignored"
        name = var[len("TRAINLET_"):].lower().replace("_", "-")
        if value is None or name not in self.specs:
            return None
        text = str(value).strip()
        wants = []
        for _, kind, value_name, _ in self.specs[name]:
            if kind == "kInt":
                ok, want = re.fullmatch(r"[+-]?\d+", text) is not None, "an integer"
            elif kind == "kBool":
                ok, want = text.lower() in ("true", "1", "yes", "false", "0", "no"), "true or false"
            elif kind == "kDuration":
                try:
                    parse_duration_s(text)
                    ok = True
                except ValueError:
                    ok = False
                want = "a duration such as 30s, 500ms, 2m"
            elif "|" in value_name and all(re.fullmatch(r"[a-z0-9-]+|N|MIN:MAX", t)
                                           for t in value_name.split("|")):
                pats = [r"\d+" if t == "N" else r"\d+:\d+" if t == "MIN:MAX" else re.escape(t)
                        for t in value_name.split("|")]
                ok, want = re.fullmatch("|".join(pats), text) is not None, value_name
            else:
                ok, want = True, ""
            if ok:
                return None
            wants.append(want)
        return f"{var}={value!r} is not {' or '.join(sorted(set(wants)))}: trainlet exits 64"


def env_name(option_name):
    return "TRAINLET_" + option_name.upper().replace("-", "_")


# --- Schemas ------------------------------------------------------------------------------------

def _strict(schema):
    """Closes every object schema that lists its properties, as strict field validation does."""
    if isinstance(schema, dict):
        if (schema.get("type") == "object" and "properties" in schema
                and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for v in schema.values():
            _strict(v)
    elif isinstance(schema, list):
        for v in schema:
            _strict(v)
    return schema


def load_schemas(schema_dir=SCHEMA_DIR):
    """{(apiVersion, kind): validator} for every CRD file in schema_dir."""
    out = {}
    for name in sorted(os.listdir(schema_dir)):
        if not name.endswith(".yaml"):
            continue
        with open(os.path.join(schema_dir, name)) as f:
            crd = yaml.load(f, Loader=LOADER)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            out[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return out


# --- Walking the objects ------------------------------------------------------------------------

class Doc:
    def __init__(self, path, index, obj):
        self.path, self.index, self.obj = path, index, obj
        self.kind = obj.get("kind") if isinstance(obj, dict) else None
        self.api = obj.get("apiVersion") if isinstance(obj, dict) else None
        self.name = ((obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None)

    def where(self):
        return f"{os.path.relpath(self.path, REPO)}[{self.index}] {self.kind}/{self.name}"


class PodTemplate:
    """A pod spec found in a document, with the Job spec that owns it (if any)."""

    def __init__(self, doc, where, template, job_spec=None, job_kind="Job", role=None):
        self.doc, self.where, self.template, self.job_spec = doc, where, template, job_spec
        self.spec = (template or {}).get("spec") or {}
        self.labels = ((template or {}).get("metadata") or {}).get("labels") or {}
        self.job_kind, self.role = job_kind, role
        self.replicated_job = None
        self.claims = set()

    def containers(self, init=False):
        return self.spec.get("initContainers" if init else "containers") or []


def pod_templates(doc):
    o, kind = doc.obj, doc.kind
    spec = o.get("spec") or {}
    out = []
    if kind in ("JobSet", "ClusterTrainingRuntime", "TrainingRuntime"):
        js = spec if kind == "JobSet" else ((spec.get("template") or {}).get("spec") or {})
        for rj in js.get("replicatedJobs") or []:
            job = (rj.get("template") or {}).get("spec") or {}
            p = PodTemplate(doc, f"{doc.where()} replicatedJobs[{rj.get('name')}]",
                            job.get("template"), job, role=rj.get("name"))
            p.replicated_job = rj
            out.append(p)
    elif kind == "Job" and doc.api == "batch.volcano.sh/v1alpha1":
        for t in spec.get("tasks") or []:
            out.append(PodTemplate(doc, f"{doc.where()} tasks[{t.get('name')}]", t.get("template"),
                                   None, job_kind="VolcanoTask", role=t.get("name")))
    elif kind == "Job":
        out.append(PodTemplate(doc, doc.where(), spec.get("template"), spec))
    elif kind == "Deployment":
        out.append(PodTemplate(doc, doc.where(), spec.get("template"), None, job_kind="Deployment"))
    elif kind == "StatefulSet":
        p = PodTemplate(doc, doc.where(), spec.get("template"), None, job_kind="StatefulSet")
        # Its claim templates are volumes of every pod.
        p.claims = {(c.get("metadata") or {}).get("name")
                    for c in spec.get("volumeClaimTemplates") or []}
        out.append(p)
    return out


def env_of(container):
    return {e.get("name"): e.get("value") for e in container.get("env") or [] if "name" in e}


def trainlet_command(container):
    """(subcommand, argv) when the container runs trainlet, else (None, argv)."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if argv and (argv[0] == "trainlet" or argv[0].endswith("/trainlet")) and len(argv) > 1:
        return argv[1], argv
    return None, argv


def flag_value(argv, flag):
    """--flag=V or --flag V before `--`; None when absent."""
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def merged_node(node, trainer):
    """The node container as Trainer runs it: trainer.command/args replace the
    runtime's, trainer.env entries replace same-named ones and add the rest."""
    c = dict(node)
    if trainer.get("command"):
        c["command"] = list(trainer["command"])
        c.pop("args", None)
    if trainer.get("args"):
        c["args"] = list(trainer["args"])
    env = {e.get("name"): e for e in node.get("env") or []}
    for e in trainer.get("env") or []:
        env[e.get("name")] = e
    c["env"] = list(env.values())
    return c


def option(container, argv, name):
    """A trainlet option as the agent reads it: flag, then TRAINLET_* env."""
    v = flag_value(argv, "--" + name)
    if v is None:
        v = env_of(container).get("TRAINLET_" + name.upper().replace("-", "_"))
    return v


# --- Checks -------------------------------------------------------------------------------------

class Validator:
    def __init__(self, schemas=None, contract=None, repo=REPO):
        self.schemas = schemas if schemas is not None else load_schemas()
        self.contract = contract or Contract(repo)
        self.repo = repo
        self.errors = []

    def err(self, where, message):
        self.errors.append(f"{where}: {message}")

    # Entry point: every document of a set of files, checked together (the
    # cross-object rules need the TrainJob and its runtime, agents and their
    # coordinator, pods and the ConfigMaps they mount).
    def validate(self, docs):
        for d in docs:
            self.check_document(d)
        known = [d for d in docs if (d.api, d.kind) in self.schemas or (d.api, d.kind) in KNOWN_CORE]
        pods = [p for d in known for p in pod_templates(d)]
        for p in pods:
            self.check_pod(p, docs)
        for d in known:
            if d.kind == "JobSet" or d.kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
                self.check_jobset_failure_policy(d)
            if d.kind == "Job" and d.api == "batch.volcano.sh/v1alpha1":
                self.check_volcano(d)
            if d.kind == "TrainJob":
                self.check_trainjob(d, docs)
            if d.kind == "Deployment":
                self.check_deployment(d)
            if d.kind == "StatefulSet":
                self.check_statefulset(d, docs)
            if d.kind == "ServiceMonitor":
                self.check_service_monitor(d, docs, pods)
            if d.kind == "PrometheusRule":
                self.check_prometheus_rule(d)
            if d.kind == "Service":
                self.check_service(d, pods)
        self.check_coordinators(docs, pods)
        return self.errors

    def check_document(self, d):
        if not isinstance(d.obj, dict):
            self.err(d.where(), "not a mapping")
            return
        key = (d.api, d.kind)
        if key not in self.schemas and key not in KNOWN_CORE:
            self.err(d.where(), f"unknown apiVersion/kind {d.api}/{d.kind}: no schema in deploy/schemas/ "
                     "and not a core object this validator knows")
            return
        name = d.name
        if not isinstance(name, str) or not DNS_SUBDOMAIN.match(name) or len(name) > 253:
            self.err(d.where(), f"metadata.name {name!r} is not a DNS subdomain name")
        if d.kind in ("JobSet", "TrainJob", "Service") or (d.kind == "Job" and "volcano" in d.api):
            # Their names become host names or Service names: a DNS label.
            if isinstance(name, str) and not DNS_LABEL.match(name):
                self.err(d.where(), f"metadata.name {name!r} must be a DNS label (host names derive from it)")
        if key in self.schemas:
            for e in sorted(self.schemas[key].iter_errors(d.obj), key=lambda e: list(e.absolute_path)):
                path = ".".join(str(p) for p in e.absolute_path) or "(root)"
                self.err(d.where(), f"schema: {path}: {e.message[:300]}")
        if d.kind == "ConfigMap" and not isinstance(d.obj.get("data"), dict):
            self.err(d.where(), "ConfigMap without data")

    def check_pod(self, p, docs):
        w = p.where
        if not isinstance(p.template, dict):
            self.err(w, "no pod template")
            return
        spec = p.spec
        containers, inits = p.containers(), p.containers(init=True)
        if not containers:
            self.err(w, "pod template without containers")
        names = [c.get("name") for c in inits + containers]
        for c in inits + containers:
            cw = f"{w} container {c.get('name')}"
            if not isinstance(c.get("name"), str) or not DNS_LABEL.match(c.get("name")):
                self.err(cw, "container name must be a DNS label")
            if not c.get("image"):
                self.err(cw, "no image")
            port_names = set()
            for port in c.get("ports") or []:
                pn = port.get("name")
                if not pn:
                    self.err(cw, f"containerPort {port.get('containerPort')} has no name (name every port)")
                elif not PORT_NAME.match(pn):
                    self.err(cw, f"port name {pn!r}: at most 15 lower-case letters, digits and '-'")
                elif pn in port_names:
                    self.err(cw, f"port name {pn!r} used twice")
                port_names.add(pn)
                if not isinstance(port.get("containerPort"), int) or not 0 < port["containerPort"] < 65536:
                    self.err(cw, f"containerPort {port.get('containerPort')!r} is not 1..65535")
            vols = {v.get("name") for v in spec.get("volumes") or []} | p.claims
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in vols:
                    self.err(cw, f"volumeMount {m.get('name')!r} names no volume of the pod")
        if len(set(names)) != len(names):
            self.err(w, f"container names repeat: {names}")
        self.check_configmaps(p, docs)

        agents = [(c, *trainlet_command(c)) for c in containers]
        agents = [(c, sub, argv) for c, sub, argv in agents if sub is not None]
        for c, sub, argv in agents:
            cw = f"{w} container {c.get('name')}"
            if sub not in AGENT_COMMANDS + SERVER_COMMANDS + ("health", "version", "probe"):
                self.err(cw, f"unknown trainlet command {sub!r}")
                continue
            if sub in ("run", "mpi-launcher") and "--" not in argv:
                self.err(cw, f"`trainlet {sub}` needs `-- COMMAND`")
            self.check_trainlet_container(cw, spec, c, sub, argv)
            self.check_init_pattern(cw, p, c, argv)
        is_trainlet_job = any(sub in AGENT_COMMANDS for _, sub, _ in agents)
        is_coordinator = any(sub == "coordinator" for _, sub, _ in agents)
        if p.job_spec is not None:
            self.check_pod_failure_policy(p, is_trainlet_job, is_coordinator)
        if p.job_kind == "Job" and is_trainlet_job and p.doc.kind == "JobSet":
            self.check_node_count(p, agents)
        if p.job_kind == "Job" and is_trainlet_job:
            self.check_elastic_success(p, agents)

    def check_trainlet_container(self, cw, spec, c, sub, argv):
        """What one container running `trainlet SUB` needs of itself: its TRAINLET_*
        variables, grace period, probes and token."""
        if sub not in AGENT_COMMANDS + SERVER_COMMANDS:
            return
        for e in c.get("env") or []:
            name = e.get("name")
            if isinstance(name, str) and name.startswith("TRAINLET_"):
                problem = self.contract.options.problem(name, e.get("value"))
                if problem:
                    self.err(cw, problem)
        if sub in AGENT_COMMANDS:
            self.check_grace(cw, spec, c, argv)
        self.check_probes(cw, c, sub, argv)
        self.check_token(cw, spec, c, sub, argv)
        if sub == "controller":
            self.check_controller(cw, spec, c, argv)
        self.check_tls_key_mode(cw, spec, c, argv)

    def check_probes(self, cw, c, sub, argv):
        """A gRPC probe must reach trainlet's health service: the agent's --health-port
        (config/run_config.cc), the coordinator's own port or its --health-port."""
        opts = self.contract.options
        try:
            if sub == "coordinator":
                port = int(option(c, argv, "port") or opts.default_int("port", "coordinator_config.cc"))
                health = int(option(c, argv, "health-port") or 0)
                tls = any(option(c, argv, t) for t in ("tls-cert", "tls-key", "tls-ca", "tls-dir"))
                allowed = {health} if health and tls else {port} | ({health} if health else set())
                what = (f"the coordinator's --health-port {health} (with TLS its port answers only "
                        "clients with a certificate)" if health and tls else
                        f"the coordinator port {port}" + (f" or --health-port {health}" if health else ""))
            elif sub == "controller":
                listen = option(c, argv, "listen") or opts.spec("listen", "controller_command.cc")[2]
                port = int(str(listen).rpartition(":")[2])
                tls = any(option(c, argv, t) for t in ("tls-cert", "tls-key", "tls-ca", "tls-dir"))
                allowed = set() if tls else {port}
                what = ("nothing a probe can reach: with TLS its gRPC port answers only clients "
                        "with a certificate; probe the views' /healthz" if tls else
                        f"the controller's gRPC port {port}")
                self.check_http_probes(cw, c, argv)
            else:
                health = int(option(c, argv, "health-port") or
                             opts.default_int("health-port", "run_config.cc"))
                allowed = {health} if health else set()
                what = f"--health-port {health}" if health else "nothing: --health-port 0 turns health off"
        except ValueError:
            return  # the value itself is reported by the TRAINLET_* check
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            grpc = (c.get(kind) or {}).get("grpc")
            if grpc is None:
                continue
            if grpc.get("port") not in allowed:
                self.err(cw, f"{kind} grpc.port {grpc.get('port')!r}: trainlet's health service is on "
                         f"{what}, so the probe would never pass")

    def check_http_probes(self, cw, c, argv):
        """The controller's HTTP probes: its views' port, and /healthz (the one path
        that wants no token and touches no job)."""
        http = option(c, argv, "http") or self.contract.options.spec("http", "controller_command.cc")[2]
        port = int(str(http).rpartition(":")[2])
        named = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            get = (c.get(kind) or {}).get("httpGet")
            if get is None:
                continue
            target = named.get(get.get("port"), get.get("port"))
            if target != port:
                self.err(cw, f"{kind} httpGet port {get.get('port')!r} is not the views' port {port}")
            if get.get("path") != "/healthz":
                self.err(cw, f"{kind} httpGet path {get.get('path')!r}: probe /healthz (it needs no "
                         "token and reads no job)")

    @staticmethod
    def secret_of(spec, c, path):
        """The Secret volume mounted in container `c` that holds file `path`, or None."""
        vols = {v.get("name"): v for v in spec.get("volumes") or []}
        for m in c.get("volumeMounts") or []:
            secret = (vols.get(m.get("name")) or {}).get("secret")
            if secret is None:
                continue
            mount = m.get("mountPath", "").rstrip("/")
            if m.get("subPath"):
                if mount == path:
                    return secret
                continue
            key = path[len(mount) + 1:] if path.startswith(mount + "/") else None
            if key is None:
                continue
            items = secret.get("items")
            if items is None or key in {i.get("path") for i in items}:
                return secret
        return None

    @staticmethod
    def secret_mounts(spec, c):
        vols = {v.get("name"): v for v in spec.get("volumes") or []}
        return [m.get("mountPath") for m in c.get("volumeMounts") or []
                if (vols.get(m.get("name")) or {}).get("secret") is not None]

    def check_token(self, cw, spec, c, sub, argv):
        """The token file trainlet reads must be in a Secret mounted in this container."""
        path = option(c, argv, "token-file")
        default = None
        if path is None and sub in AGENT_COMMANDS:
            m = re.search(r"(/\S+)\s+if present", self.contract.options.spec("token-file", "run_config.cc")[2])
            default = path = m.group(1) if m else None
        if path is None:
            self.err(cw, f"`trainlet {sub}` without --token-file (TRAINLET_TOKEN_FILE) accepts "
                     "any agent: mount the job's token Secret and name its file")
            return
        if path in ("", "none"):
            return  # explicitly unauthenticated
        if self.secret_of(spec, c, path) is not None:
            return
        mounts = self.secret_mounts(spec, c)
        if default is not None:
            self.err(cw, f"no token: trainlet reads {default} by default, but no Secret is mounted "
                     f"there (Secrets at {mounts}); mount the token Secret at "
                     f"{os.path.dirname(default)} or set TRAINLET_TOKEN_FILE, or the job runs "
                     "unauthenticated")
        else:
            self.err(cw, f"token file {path} is in no Secret mounted in this container (Secrets at "
                     f"{mounts}): trainlet exits 78 or, as an agent, cannot authenticate")

    def check_controller(self, cw, spec, c, argv):
        """`trainlet controller`: its views' token in a mounted Secret; its history on a
        volume that outlives the pod (checked with its StatefulSet)."""
        path = option(c, argv, "http-token-file")
        if path is None:
            self.err(cw, "`trainlet controller` without --http-token-file serves every job's "
                     "commands, failures and hang evidence to anyone who reaches its views "
                     "(docs/security.md): give it the token Secret's file")
        elif self.secret_of(spec, c, path) is None:
            self.err(cw, f"--http-token-file {path} is in no Secret mounted in this container "
                     f"(Secrets at {self.secret_mounts(spec, c)}): trainlet exits 78")

    def check_tls_key_mode(self, cw, spec, c, argv):
        """A TLS key in a Secret must not be readable by other users: Kubernetes mounts
        Secrets 0644 unless told, and trainlet warns about (o+r) or refuses (o+w) such
        a key (rendezvous/tls_files.h)."""
        key = option(c, argv, "tls-key")
        tls_dir = option(c, argv, "tls-dir")
        path = key if key is not None else (tls_dir.rstrip("/") + "/tls.key" if tls_dir else None)
        if path is None:
            return
        secret = self.secret_of(spec, c, path)
        if secret is None:
            return
        mode = secret.get("defaultMode", 0o644)
        for item in secret.get("items") or []:
            if path.endswith("/" + str(item.get("path"))) and "mode" in item:
                mode = item["mode"]
        if isinstance(mode, int) and mode & 0o006:
            self.err(cw, f"the TLS key {path} is mounted with mode {mode:04o}: other users can read "
                     "it (trainlet warns, and refuses one they can write); set the Secret "
                     "volume's defaultMode: 0400 (0440 with fsGroup)")

    def check_elastic_success(self, p, agents):
        """An elastic Job (TRAINLET_NNODES=MIN:MAX) succeeds with MIN pods: by default a
        Job waits for all `completions`, so a pod late to a finished job fails it."""
        job = p.job_spec
        completions = job.get("completions", job.get("parallelism", 1))
        replicas = (p.replicated_job or {}).get("replicas", 1)
        for c, sub, argv in agents:
            n = option(c, argv, "nnodes")
            m = re.fullmatch(r"(\d+):(\d+)", str(n or ""))
            if not m or not isinstance(completions, int) or not isinstance(replicas, int):
                continue
            low = int(m.group(1))
            if replicas > 1 and completions * replicas > low:
                # Several Jobs: JobSet waits for all of them unless told otherwise.
                sp = (p.doc.obj.get("spec") or {}).get("successPolicy") or {}
                if p.doc.kind == "JobSet" and not (
                        sp.get("operator") == "Any" and
                        p.replicated_job.get("name") in (sp.get("targetReplicatedJobs") or
                                                         [p.replicated_job.get("name")])):
                    self.err(f"{p.where} container {c.get('name')}",
                             f"TRAINLET_NNODES {n} over {replicas} Jobs: the JobSet waits for all "
                             "of them and fails when a pod is late to a finished job; add "
                             f"successPolicy: {{operator: Any, targetReplicatedJobs: "
                             f"[{p.replicated_job.get('name')}]}} (any pod exits 0 only when the "
                             "job succeeded)")
            if completions <= low:
                continue
            rules = (job.get("successPolicy") or {}).get("rules") or []
            good = [r for r in rules if not r.get("succeededIndexes")
                    and isinstance(r.get("succeededCount"), int) and 0 < r["succeededCount"] <= low]
            if not good or job.get("completionMode") != "Indexed":
                self.err(f"{p.where} container {c.get('name')}",
                         f"TRAINLET_NNODES {n} with completions {completions}: the Job waits for all "
                         f"{completions} pods and fails when one is late to a finished job; add "
                         f"successPolicy: {{rules: [{{succeededCount: {low}}}]}} (Indexed Jobs, "
                         "Kubernetes 1.31+)")

    def check_configmaps(self, p, docs):
        defined = {d.name for d in docs if d.kind == "ConfigMap"}
        for v in p.spec.get("volumes") or []:
            cm = (v.get("configMap") or {}).get("name")
            if cm and cm not in defined and not (v.get("configMap") or {}).get("optional"):
                self.err(p.where, f"volume {v.get('name')!r} mounts ConfigMap {cm!r}, which no "
                         "manifest here defines (deploy/common/ holds the shared ones)")

    def check_grace(self, cw, spec, c, argv):
        text = option(c, argv, "grace-period")
        try:
            grace = parse_duration_s(text) if text is not None else self.contract.default_grace_s
        except ValueError as e:
            self.err(cw, f"--grace-period: {e}")
            return
        tgps = spec.get("terminationGracePeriodSeconds", K8S_DEFAULT_TERMINATION_GRACE_S)
        origin = "" if "terminationGracePeriodSeconds" in spec else " (Kubernetes' default)"
        if not isinstance(tgps, int) or tgps < grace + GRACE_MARGIN_S:
            src = f"--grace-period {text}" if text is not None else \
                f"the default --grace-period ({self.contract.default_grace_s:g}s)"
            self.err(cw, f"terminationGracePeriodSeconds {tgps}{origin} must be at least {GRACE_MARGIN_S} s above {src}: "
                     "otherwise the kubelet's SIGKILL comes before trainlet's own")

    def check_init_pattern(self, cw, p, c, argv):
        path = argv[0]
        if path == "trainlet":
            return  # from the image's PATH (an image with trainlet in it)
        if not path.startswith("/"):
            self.err(cw, f"trainlet path {path!r} must be absolute or `trainlet`")
            return
        directory = os.path.dirname(path)
        mounts = {m.get("mountPath", "").rstrip("/"): m.get("name") for m in c.get("volumeMounts") or []}
        vol_name = mounts.get(directory)
        if vol_name is None:
            if TRAINLET_IMAGE.match(c.get("image") or ""):
                return  # the trainlet image itself
            self.err(cw, f"runs {path} but mounts no volume at {directory}: the init-container "
                     "pattern copies trainlet into an emptyDir mounted there")
            return
        volumes = {v.get("name"): v for v in p.spec.get("volumes") or []}
        if "emptyDir" not in (volumes.get(vol_name) or {}):
            self.err(cw, f"volume {vol_name!r} at {directory} is not an emptyDir")
        copied = False
        for ic in p.containers(init=True):
            ic_mounts = [m for m in ic.get("volumeMounts") or [] if m.get("name") == vol_name]
            if not ic_mounts:
                continue
            if not TRAINLET_IMAGE.match(ic.get("image") or ""):
                self.err(cw, f"init container {ic.get('name')!r} writes {vol_name!r} but is not the "
                         "trainlet image (.../trainlet/trainlet:VERSION)")
                continue
            dest = ic_mounts[0].get("mountPath", "").rstrip("/") + "/" + os.path.basename(path)
            ic_argv = list(ic.get("command") or []) + list(ic.get("args") or [])
            if dest in ic_argv:
                copied = True
            else:
                self.err(cw, f"runs {path}, but init container {ic.get('name')!r} does not copy "
                         f"trainlet to {dest} (its mount of {vol_name!r}): argv {ic_argv}")
        if not copied and not any(e.startswith(cw) and "init container" in e for e in self.errors):
            self.err(cw, f"runs {path} from volume {vol_name!r}, but no init container copies "
                     "trainlet into it")

    def check_pod_failure_policy(self, p, is_trainlet_job, is_coordinator=False):
        w, job, restart = p.where, p.job_spec, p.spec.get("restartPolicy")
        pfp = job.get("podFailurePolicy")
        if is_coordinator:
            if job.get("parallelism", 1) != 1 or job.get("completions", 1) != 1:
                self.err(w, "a job's coordinator runs once: parallelism and completions must be 1")
            if pfp is None or restart != "Never":
                self.err(w, "a `trainlet coordinator` Job needs restartPolicy: Never and a "
                         f"podFailurePolicy that fails it on {sorted(self.contract.coordinator_must_fail)}: "
                         "it exits when the job is over, and a restarted one remembers nothing")
        if pfp is None:
            if is_trainlet_job and restart == "Never":
                self.err(w, "a trainlet Job with restartPolicy: Never needs a podFailurePolicy that "
                         "fails the Job on configuration errors (docs/exit-codes.md)")
            if is_trainlet_job and restart not in ("Never", "OnFailure"):
                self.err(w, "restartPolicy must be Never (with podFailurePolicy) or OnFailure")
            return
        if restart != "Never":
            self.err(w, f"podFailurePolicy needs the pod's restartPolicy: Never, not {restart!r}")
        names = {c.get("name") for c in p.containers() + p.containers(init=True)}
        failed = set()
        for i, rule in enumerate(pfp.get("rules") or []):
            rw = f"{w} podFailurePolicy.rules[{i}]"
            codes = rule.get("onExitCodes")
            if not codes:
                continue
            if codes.get("containerName") and codes["containerName"] not in names:
                self.err(rw, f"containerName {codes['containerName']!r} is no container of the pod")
            values = set(codes.get("values") or [])
            if codes.get("operator") != "In":
                if is_trainlet_job:
                    self.err(rw, "use operator In with explicit codes: NotIn would act on worker "
                             "codes the contract does not classify")
                continue
            action = rule.get("action")
            if action == "FailJob":
                may = self.contract.coordinator_may_fail if is_coordinator else self.contract.never_retry
                bad = values - may
                if bad:
                    self.err(rw, f"FailJob on {sorted(bad)}: retriable codes (docs/exit-codes.md); "
                             f"FailJob only on {sorted(may)}")
                failed |= values
            elif action == "Ignore":
                bad = values - self.contract.ignorable
                if bad:
                    self.err(rw, f"Ignore on {sorted(bad)}: only {sorted(self.contract.ignorable)} "
                             "(another node failed, node unhealthy) is not this pod's failure")
        if is_trainlet_job:
            missing = self.contract.must_fail - failed
            if missing:
                self.err(w, f"podFailurePolicy does not fail the Job on {sorted(missing)} "
                         "(usage, rejected, config: retrying cannot help)")
        if is_coordinator:
            missing = self.contract.coordinator_must_fail - failed
            if missing:
                self.err(w, f"podFailurePolicy does not fail the coordinator's Job on {sorted(missing)} "
                         "(the job is over, or retrying cannot help)")

    def check_jobset_failure_policy(self, d):
        js = d.obj.get("spec") or {}
        if d.kind != "JobSet":
            js = (js.get("template") or {}).get("spec") or {}
        fails = any(r.get("action") == "FailJob"
                    for rj in js.get("replicatedJobs") or []
                    for r in ((((rj.get("template") or {}).get("spec") or {}).get("podFailurePolicy")
                               or {}).get("rules") or []))
        if not fails:
            return
        rules = (js.get("failurePolicy") or {}).get("rules") or []
        if not any(r.get("action") == "FailJobSet" and "PodFailurePolicy" in (r.get("onJobFailureReasons") or [])
                   for r in rules):
            self.err(d.where(), "a Job here fails on configuration errors (podFailurePolicy FailJob), "
                     "but failurePolicy has no FailJobSet rule for onJobFailureReasons "
                     "[PodFailurePolicy]: JobSet would restart the job instead")

    def check_node_count(self, p, agents):
        """A plain JobSet sets no PET_NNODES: TRAINLET_NNODES must match the pods."""
        if p.doc.kind != "JobSet":
            return
        job = p.job_spec
        pods = job.get("parallelism", 1) * (p.replicated_job or {}).get("replicas", 1)
        for c, sub, argv in agents:
            if sub == "mpi-worker":
                continue
            n = option(c, argv, "nnodes")
            cw = f"{p.where} container {c.get('name')}"
            if n is None:
                if pods > 1 or "PET_NNODES" not in env_of(c):
                    self.err(cw, "a JobSet pod needs TRAINLET_NNODES (JobSet sets no PET_NNODES; "
                             "without it trainlet exits 78)")
                continue
            top = str(n).split(":")[-1]
            if not top.isdigit() or int(top) != pods:
                self.err(cw, f"TRAINLET_NNODES {n} does not match the {pods} pods of the "
                         "replicated job (parallelism x replicas)")

    def check_volcano(self, d):
        spec = d.obj.get("spec") or {}
        w = d.where()
        seen_event = False
        terminated = set()
        for i, pol in enumerate(spec.get("policies") or []):
            pw = f"{w} policies[{i}]"
            action = pol.get("action")
            if action not in VOLCANO_ACTIONS:
                self.err(pw, f"unknown Volcano action {action!r}")
            if pol.get("event") in ("PodFailed", "*") or "PodFailed" in (pol.get("events") or []):
                seen_event = True
            code = pol.get("exitCode")
            if code is None:
                continue
            if seen_event:
                self.err(pw, f"exitCode {code} comes after a PodFailed policy, which matches first")
            if action in ("TerminateJob", "AbortJob"):
                if code not in self.contract.never_retry:
                    self.err(pw, f"{action} on exit {code}: a retriable code (docs/exit-codes.md)")
                terminated.add(code)
            elif code in self.contract.never_retry:
                self.err(pw, f"{action} on exit {code}: retrying a configuration error cannot help; "
                         "use TerminateJob")
        pods = [pt for pt in pod_templates(d)]
        runs = any(trainlet_command(c)[0] in AGENT_COMMANDS for pt in pods for c in pt.containers())
        if runs:
            missing = self.contract.must_fail - terminated
            if missing:
                self.err(w, f"no TerminateJob policy for exit codes {sorted(missing)}")
            plugins = spec.get("plugins") or {}
            for needed in ("env", "svc"):
                if needed not in plugins:
                    self.err(w, f"plugin {needed!r} missing: trainlet's Volcano discovery reads it")
            publish = any("--publish-not-ready-addresses" in str(a) for a in plugins.get("svc") or [])
            for pt in pods:
                if pt.spec.get("restartPolicy") not in ("Never", "OnFailure"):
                    self.err(pt.where, "restartPolicy must be Never or OnFailure")
                for c in pt.containers():
                    if trainlet_command(c)[0] in AGENT_COMMANDS and c.get("readinessProbe") and not publish:
                        self.err(f"{pt.where} container {c.get('name')}",
                                 "readinessProbe on trainlet: Volcano's Service publishes a pod only "
                                 "once Ready, so pod 0's name would not resolve and the round never "
                                 "closes (docs/configuration.md, Volcano jobs)")

    def runtime_of(self, tj, docs):
        ref = (tj.obj.get("spec") or {}).get("runtimeRef") or {}
        kind = ref.get("kind", "ClusterTrainingRuntime")
        for d in docs:
            if d.kind == kind and d.name == ref.get("name"):
                return d
        return None

    def check_trainjob(self, tj, docs):
        w = tj.where()
        rt = self.runtime_of(tj, docs)
        if rt is None:
            self.err(w, "runtimeRef names no runtime defined in these manifests")
            return
        trainer = (tj.obj.get("spec") or {}).get("trainer") or {}
        ml = (rt.obj.get("spec") or {}).get("mlPolicy") or {}
        tj_env = {e.get("name"): e.get("value") for e in trainer.get("env") or []}
        for name in tj_env:
            if name and name.startswith("PET_"):
                self.err(w, f"{name} is set by Trainer (reserved)")
        ancestors = [p for p in pod_templates(rt)
                     if ((p.replicated_job or {}).get("template") or {}).get("metadata", {}).get("labels", {})
                     .get("trainer.kubeflow.org/trainjob-ancestor-step") == "trainer"]
        if len(ancestors) != 1:
            self.err(rt.where(), "exactly one replicated job must carry the label "
                     "trainer.kubeflow.org/trainjob-ancestor-step: trainer")
            return
        node = [c for c in ancestors[0].containers() if c.get("name") == "node"]
        if not node:
            self.err(ancestors[0].where, "Trainer applies the TrainJob to the container named node: none")
            return
        node = node[0]
        sub, argv = trainlet_command(node)
        if trainer.get("command"):
            cmd = trainer["command"]
            if sub is not None and cmd[:2] != argv[:2]:
                self.err(w, f"trainer.command {cmd[:3]} replaces the runtime's, so it must start with "
                         f"{argv[:2]} (trainlet as the entrypoint)")
        if any(trainer.get(k) for k in ("env", "command", "args")):
            # Trainer merges these into the node container: check what will run.
            merged = merged_node(node, trainer)
            msub, margv = trainlet_command(merged)
            if msub is not None:
                self.check_trainlet_container(f"{w} trainer (merged into container node)",
                                              ancestors[0].spec, merged, msub, margv)
        num_nodes = trainer.get("numNodes", ml.get("numNodes", 1))
        if "mpi" in ml:
            mpi = ml["mpi"] or {}
            nnodes = tj_env.get("TRAINLET_NNODES", env_of(node).get("TRAINLET_NNODES"))
            workers = num_nodes - 1 if mpi.get("runLauncherAsNode") else num_nodes
            workers = max(workers, 1)
            if nnodes is None or str(nnodes) != str(workers):
                self.err(w, f"the MPI launcher's TRAINLET_NNODES ({nnodes}) must be the worker pods "
                         f"({workers}, from numNodes {num_nodes}): Trainer sets no PET_NNODES for MPI")
            key_path = mpi.get("sshAuthMountPath", "/root/.ssh")
            for p in pod_templates(rt):
                for c in p.containers():
                    csub, _ = trainlet_command(c)
                    if csub not in ("mpi-launcher", "mpi-worker"):
                        continue
                    e = env_of(c)
                    if e.get("TRAINLET_SSH_KEY_DIR") not in (None, key_path):
                        self.err(f"{p.where} container {c.get('name')}",
                                 f"TRAINLET_SSH_KEY_DIR {e['TRAINLET_SSH_KEY_DIR']} is not where "
                                 f"Trainer mounts the job's SSH Secret ({key_path})")
                    slots = e.get("TRAINLET_NPROC_PER_NODE")
                    want = trainer.get("numProcPerNode", mpi.get("numProcPerNode", 1))
                    if csub == "mpi-worker" and slots is not None and str(slots) != str(want):
                        self.err(f"{p.where} container {c.get('name')}",
                                 f"TRAINLET_NPROC_PER_NODE {slots} differs from numProcPerNode {want} "
                                 "(the slots in each worker's hostfile line)")
        elif sub in AGENT_COMMANDS and ("TRAINLET_NNODES" in tj_env or "TRAINLET_NNODES" in env_of(node)):
            self.err(w, "TRAINLET_NNODES in a torch TrainJob: Trainer's PET_NNODES already says it, "
                     "and the two would disagree when numNodes changes")

    def check_selector(self, d):
        """A Deployment's or StatefulSet's selector matches its own pod template."""
        spec = d.obj.get("spec") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if not sel:
            self.err(d.where(), "spec.selector.matchLabels is required")
        elif any(labels.get(k) != v for k, v in sel.items()):
            self.err(d.where(), f"selector {sel} does not match the pod template's labels {labels}")

    def check_deployment(self, d):
        spec = d.obj.get("spec") or {}
        w = d.where()
        self.check_selector(d)
        for c in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
            if trainlet_command(c)[0] == "coordinator":
                self.err(w, "`trainlet coordinator` in a Deployment: it exits when the job is over, "
                         "and the Deployment starts it again with no memory of the job; run it "
                         "as a batch/v1 Job (deploy/coordinator/coordinator.yaml)")

    def check_statefulset(self, d, docs):
        spec = d.obj.get("spec") or {}
        w = d.where()
        self.check_selector(d)
        services = {x.name for x in docs if x.kind == "Service"}
        if spec.get("serviceName") not in services:
            self.err(w, f"serviceName {spec.get('serviceName')!r} names no Service here")
        claims = {(c.get("metadata") or {}).get("name"): c for c in spec.get("volumeClaimTemplates") or []}
        for c in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
            sub, argv = trainlet_command(c)
            if sub != "controller":
                continue
            cw = f"{w} container {c.get('name')}"
            if spec.get("replicas", 1) != 1:
                self.err(cw, "`trainlet controller` keeps its history in one SQLite file: replicas "
                         "must be 1 (two controllers would each see half the reports)")
            db = option(c, argv, "db")
            if not db:
                self.err(cw, "`trainlet controller` without --db keeps its history in memory: a "
                         "rescheduled pod forgets every job")
                continue
            on_claim = [m for m in c.get("volumeMounts") or [] if m.get("name") in claims
                        and db.startswith(m.get("mountPath", "").rstrip("/") + "/")]
            if not on_claim:
                self.err(cw, f"--db {db} is on no volumeClaimTemplate's volume: the history would "
                         "not outlive the pod")

    def check_service_monitor(self, d, docs, pods):
        spec = d.obj.get("spec") or {}
        w = d.where()
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        services = [x for x in docs if x.kind == "Service" and sel and all(
            ((x.obj.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in sel.items())]
        if not services:
            self.err(w, f"selector {sel} matches the labels of no Service here")
            return
        for svc in services:
            ports = {p.get("name") for p in (svc.obj.get("spec") or {}).get("ports") or []}
            ssel = (svc.obj.get("spec") or {}).get("selector") or {}
            controllers = [(p, c, argv) for p in pods for c in p.containers()
                           for sub, argv in [trainlet_command(c)]
                           if sub == "controller" and all(p.labels.get(k) == v for k, v in ssel.items())]
            for ep in spec.get("endpoints") or []:
                if ep.get("port") not in ports:
                    self.err(w, f"endpoint port {ep.get('port')!r} is no port of Service {svc.name} "
                             f"({sorted(ports)})")
                if ep.get("path", "/metrics") != "/metrics":
                    self.err(w, f"endpoint path {ep.get('path')!r}: the controller serves /metrics")
                for p, c, argv in controllers:
                    if option(c, argv, "http-token-file") and not (ep.get("authorization") or
                                                                  ep.get("bearerTokenSecret")):
                        self.err(w, f"the controller ({p.where}) wants a token on /metrics "
                                 "(--http-token-file): give the endpoint authorization: {type: "
                                 "Bearer, credentials: {name: SECRET, key: token}}")

    def check_prometheus_rule(self, d):
        w = d.where()
        served = self.contract.metrics
        for g in (d.obj.get("spec") or {}).get("groups") or []:
            for r in g.get("rules") or []:
                expr = str(r.get("expr", ""))
                rw = f"{w} rule {r.get('alert') or r.get('record')}"
                for name in re.findall(r"\btrainlet_[a-z_]+", expr):
                    if name not in served:
                        close = difflib.get_close_matches(name, sorted(served), 1)
                        hint = f" (did you mean {close[0]}?)" if close else ""
                        self.err(rw, f"{name} is no metric the controller serves{hint}")
                for fn, name in re.findall(r"\b(rate|irate|increase)\s*\(\s*(trainlet_[a-z_]+)", expr):
                    if not name.endswith("_total"):
                        self.err(rw, f"{fn}({name}): {name} is a gauge; use deriv() or delta()")

    def check_service(self, d, pods):
        spec = d.obj.get("spec") or {}
        w = d.where()
        sel = spec.get("selector") or {}
        if not sel:
            self.err(w, "a Service without a selector")
            return
        targets = [p for p in pods if all(p.labels.get(k) == v for k, v in sel.items())]
        if not targets:
            self.err(w, f"selector {sel} matches no pod template here")
        for port in spec.get("ports") or []:
            if not port.get("name"):
                self.err(w, f"port {port.get('port')} has no name")
            tp = port.get("targetPort", port.get("port"))
            for p in targets:
                named = {cp.get("name"): cp.get("containerPort")
                         for c in p.containers() for cp in c.get("ports") or []}
                if isinstance(tp, str) and tp not in named:
                    self.err(w, f"targetPort {tp!r} names no container port of {p.where}")
                if isinstance(tp, int) and tp not in named.values():
                    self.err(w, f"targetPort {tp} is no container port of {p.where}")

    def check_coordinators(self, docs, pods):
        """Agents that join a standalone coordinator agree with it."""
        services = {d.name: d for d in docs if d.kind == "Service"}
        # Services the operators create: JobSet's headless one, Volcano's svc plugin.
        made = {((d.obj.get("spec") or {}).get("network") or {}).get("subdomain") or d.name
                for d in docs if d.kind == "JobSet"}
        made |= {d.name for d in docs if d.kind == "Job" and d.api == "batch.volcano.sh/v1alpha1"}
        coords = []
        for p in pods:
            for c in p.containers():
                sub, argv = trainlet_command(c)
                if sub == "coordinator":
                    coords.append((p, c, argv))
        for p in pods:
            for c in p.containers():
                sub, argv = trainlet_command(c)
                if sub not in AGENT_COMMANDS:
                    continue
                target = option(c, argv, "coordinator")
                if not target:
                    continue
                host, _, port = str(target).rpartition(":") if ":" in str(target) else (target, "", "")
                full = host
                host = host.split(".")[0]
                if host not in services:
                    local = (full == host and DNS_LABEL.match(host) and host != "localhost"
                             and not re.fullmatch(r"[\d.]+", host))
                    if local and host not in made:
                        self.err(f"{p.where} container {c.get('name')}",
                                 f"--coordinator {target}: no Service {host} here (a bare name "
                                 "resolves only to a Service in the pod's namespace); apply one "
                                 "with the job or give the full address")
                    continue
                cw = f"{p.where} container {c.get('name')}"
                svc = services[host]
                ports = [sp.get("port") for sp in (svc.obj.get("spec") or {}).get("ports") or []]
                if int(port or 29400) not in ports:
                    self.err(cw, f"--coordinator {target}: Service {host} has no port {port or 29400}")
                # The agents' UDP liveness datagrams go to the same port number
                # (docs/protocol.md, "Liveness"); without it they fall back to
                # a Report every interval, which costs the coordinator ~5x more.
                udp = [sp.get("port") for sp in (svc.obj.get("spec") or {}).get("ports") or []
                       if sp.get("protocol") == "UDP"]
                if int(port or 29400) not in udp:
                    self.err(cw, f"--coordinator {target}: Service {host} has no UDP port "
                                 f"{port or 29400} for the agents' liveness datagrams")
                if str(option(c, argv, "host-coordinator")) != "no":
                    self.err(cw, "an agent of a standalone coordinator needs TRAINLET_HOST_COORDINATOR=no")
                sel = (svc.obj.get("spec") or {}).get("selector") or {}
                mine = [x for x in coords if all(x[0].labels.get(k) == v for k, v in sel.items())]
                if not mine:
                    self.err(cw, f"Service {host} selects no `trainlet coordinator` pod")
                for cp, cc, cargv in mine:
                    for name, default in (("job-id", "trainlet"), ("nnodes", "1")):
                        a = option(c, argv, name) or default
                        b = option(cc, cargv, name) or default
                        if str(a) != str(b):
                            self.err(cw, f"{name} {a} differs from the coordinator's {b} ({cp.where})")
                    tok_a = {v.get("secret", {}).get("secretName") for v in p.spec.get("volumes") or []}
                    tok_b = {v.get("secret", {}).get("secretName") for v in cp.spec.get("volumes") or []}
                    if not (tok_a & tok_b) - {None}:
                        self.err(cw, f"mounts no Secret the coordinator ({cp.where}) mounts: the tokens differ")
                if option(c, argv, "advertise-addr") is None and not any(
                        e.get("name") == "TRAINLET_ADVERTISE_ADDR" for e in c.get("env") or []):
                    self.err(cw, "set TRAINLET_ADVERTISE_ADDR (e.g. status.podIP): behind a Service the "
                             "coordinator may not see the pod's own address")


# --- Files --------------------------------------------------------------------------------------

def yaml_files(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(x for x in dirs if os.path.join(root, x) != SCHEMA_DIR
                                 and os.path.abspath(os.path.join(root, x)) != os.path.abspath(SCHEMA_DIR))
                # *_test.yaml: promtool's rule unit tests (check_rules.py), not manifests.
                out += [os.path.join(root, f) for f in sorted(files)
                        if f.endswith((".yaml", ".yml")) and not f.endswith("_test.yaml")]
        else:
            out.append(p)
    return out


def load_docs(files):
    docs = []
    for path in files:
        with open(path) as f:
            for i, obj in enumerate(yaml.load_all(f, Loader=LOADER)):
                if obj is not None:
                    docs.append(Doc(os.path.abspath(path), i, obj))
    return docs


def main(argv):
    paths = argv[1:] or [HERE]
    docs = load_docs(yaml_files(paths))
    errors = Validator().validate(docs)
    for e in errors:
        print(e)
    print(f"validate: {len(docs)} documents, {len(errors)} problem(s)", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
