"""Tests of deploy/: every manifest passes deploy/validate.py, and the
validator catches each kind of mistake it claims to (a mutated copy of a real
manifest must fail, naming the problem).

    cd deploy && /usr/bin/python3 -m unittest -v validate_test     (ctest -R deploy_manifests)
"""
import copy
import hashlib
import os
import re
import unittest

import yaml

import validate

HERE = validate.HERE


def load(rel):
    return validate.load_docs([os.path.join(HERE, rel)])


def find(docs, kind):
    return next(d for d in docs if d.kind == kind)


def pod_spec(doc, index=0):
    return validate.pod_templates(doc)[index].spec


def container(spec, name="node"):
    return next(c for c in spec["containers"] if c["name"] == name)


def set_env(c, name, value):
    c["env"] = [e for e in c.get("env", []) if e["name"] != name] + [{"name": name, "value": value}]


def as_deployment(job):
    """Turns the coordinator's Job into the Deployment the example used to be."""
    template = job.obj["spec"]["template"]
    template["spec"].pop("restartPolicy")
    job.obj.update({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {
        "replicas": 1, "strategy": {"type": "Recreate"},
        "selector": {"matchLabels": dict(template["metadata"]["labels"])}, "template": template}})
    job.kind = "Deployment"


def rebuild(docs):
    """Fresh Doc objects after the test edited .obj in place."""
    return [validate.Doc(d.path, d.index, d.obj) for d in docs]


class ValidatorTestBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.schemas = validate.load_schemas()
        cls.contract = validate.Contract()
        cls.all_docs = validate.load_docs(validate.yaml_files([HERE]))
        cls.common = [d for d in cls.all_docs if "/common/" in d.path]

    def errors(self, docs):
        return validate.Validator(self.schemas, self.contract).validate(rebuild(docs) + self.common)

    def folder(self, name):
        return copy.deepcopy([d for d in self.all_docs if f"/{name}/" in d.path])

    def assert_error(self, docs, pattern):
        errors = self.errors(docs)
        self.assertTrue(any(re.search(pattern, e) for e in errors),
                        f"expected an error matching {pattern!r}, got:\n" + "\n".join(errors))


class ManifestsTest(ValidatorTestBase):
    def test_every_manifest_passes(self):
        errors = validate.Validator(self.schemas, self.contract).validate(self.all_docs)
        self.assertEqual(errors, [], "\n".join(errors))

    def test_every_case_is_there(self):
        kinds = {(os.path.basename(os.path.dirname(d.path)), d.kind) for d in self.all_docs}
        for want in [("kubeflow-torch", "ClusterTrainingRuntime"), ("kubeflow-torch", "TrainJob"),
                     ("kubeflow-mpi", "ClusterTrainingRuntime"), ("kubeflow-mpi", "TrainJob"),
                     ("jobset", "JobSet"), ("volcano", "Job"), ("coordinator", "Job"),
                     ("coordinator", "Service"), ("coordinator", "JobSet"),
                     ("controller", "StatefulSet"), ("controller", "Service"),
                     ("controller", "ServiceMonitor"), ("controller", "PrometheusRule")]:
            self.assertIn(want, kinds)

    def test_every_crd_kind_has_a_schema(self):
        for key in [("trainer.kubeflow.org/v1alpha1", "TrainJob"),
                    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
                    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"),
                    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
                    ("batch.volcano.sh/v1alpha1", "Job"),
                    ("monitoring.coreos.com/v1", "ServiceMonitor"),
                    ("monitoring.coreos.com/v1", "PrometheusRule")]:
            self.assertIn(key, self.schemas)

    def test_schemas_are_the_recorded_copies(self):
        with open(os.path.join(HERE, "schemas", "README.md")) as f:
            recorded = dict((m.group(2), m.group(1)) for m in
                            re.finditer(r"\b([0-9a-f]{64})\s+(\S+\.yaml)", f.read()))
        files = sorted(n for n in os.listdir(os.path.join(HERE, "schemas")) if n.endswith(".yaml"))
        self.assertEqual(sorted(recorded), files)
        for name in files:
            with open(os.path.join(HERE, "schemas", name), "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).hexdigest(), recorded[name], name)

    def test_example_script_is_the_demo_script(self):
        cm = find(load("common/train-script.yaml"), "ConfigMap")
        with open(os.path.join(validate.REPO, "scripts", "demo", "train_ddp.py")) as f:
            self.assertEqual(cm.obj["data"]["train_ddp.py"], f.read(),
                             "deploy/common/train-script.yaml is out of date with scripts/demo/train_ddp.py")

    def test_a_namespaced_training_runtime_validates_too(self):
        docs = self.folder("kubeflow-torch")
        rt = find(docs, "ClusterTrainingRuntime")
        rt.obj["kind"] = "TrainingRuntime"
        tj = find(docs, "TrainJob")
        tj.obj["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
        self.assertEqual(self.errors(docs), [])


class ContractTest(unittest.TestCase):
    def test_contract_read_from_the_sources(self):
        c = validate.Contract()
        self.assertEqual(c.never_retry, {64, 77, 78, 79, 126, 127})
        self.assertEqual(c.ignorable, {75, 81})
        self.assertNotIn(69, c.never_retry)  # lost / unreachable: a restart may help

    def test_default_grace_period_leaves_room_in_kubernetes_default(self):
        # The project's own rule, with the defaults: a pod that sets nothing
        # still gets trainlet's SIGKILL before the kubelet's.
        self.assertLessEqual(validate.default_grace_period_s() + validate.GRACE_MARGIN_S,
                             validate.K8S_DEFAULT_TERMINATION_GRACE_S)

    def test_durations(self):
        for text, s in [("30s", 30), ("500ms", 0.5), ("2m", 120), ("1h30m", 5400), ("30", 30),
                        ("1.5", 1.5)]:
            self.assertEqual(validate.parse_duration_s(text), s)
        for bad in ["", "soon", "30x", "s30"]:
            with self.assertRaises(ValueError):
                validate.parse_duration_s(bad)


class MutationTest(ValidatorTestBase):
    """Each broken copy must fail with the problem named."""

    def test_unknown_field_is_an_error(self):
        docs = self.folder("jobset")
        js = find(docs, "JobSet")
        js.obj["spec"]["replicatedJob"] = js.obj["spec"].pop("replicatedJobs")
        self.assert_error(docs, r"schema: spec: Additional properties.*replicatedJob")

    def test_wrong_type_in_a_trainjob(self):
        docs = self.folder("kubeflow-torch")
        find(docs, "TrainJob").obj["spec"]["trainer"]["numNodes"] = "two"
        self.assert_error(docs, r"TrainJob/.*schema: spec.trainer.numNodes: 'two' is not of type 'integer'")

    def test_missing_required_field_in_a_trainjob(self):
        docs = self.folder("kubeflow-torch")
        del find(docs, "TrainJob").obj["spec"]["runtimeRef"]
        self.assert_error(docs, r"'runtimeRef' is a required property")

    def test_bad_enum_in_a_runtime(self):
        docs = self.folder("kubeflow-mpi")
        find(docs, "ClusterTrainingRuntime").obj["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "MPICH"
        self.assert_error(docs, r"mpiImplementation: 'MPICH' is not one of")

    def test_bad_field_in_a_volcano_job(self):
        docs = self.folder("volcano")
        find(docs, "Job").obj["spec"]["policies"][0]["event"] = "PodCrashed"
        self.assert_error(docs, r"policies.0.event: 'PodCrashed' is not one of")

    def test_unknown_kind(self):
        docs = self.folder("jobset")
        find(docs, "JobSet").obj["apiVersion"] = "jobset.x-k8s.io/v1"
        self.assert_error(docs, r"unknown apiVersion/kind jobset.x-k8s.io/v1/JobSet")

    def test_termination_grace_not_above_grace_period(self):
        docs = self.folder("jobset")
        spec = pod_spec(find(docs, "JobSet"))
        spec["terminationGracePeriodSeconds"] = 52
        self.assert_error(docs, r"terminationGracePeriodSeconds 52 must be at least 5 s above "
                                r"--grace-period 50s")

    def test_grace_period_flag_counts(self):
        docs = self.folder("jobset")
        c = container(pod_spec(find(docs, "JobSet")))
        c["command"] = c["command"][:2] + ["--grace-period=2m"] + c["command"][2:]
        self.assert_error(docs, r"must be at least 5 s above --grace-period 2m")

    def test_default_grace_period_against_kubernetes_default(self):
        docs = self.folder("jobset")
        spec = pod_spec(find(docs, "JobSet"))
        c = container(spec)
        c["env"] = [e for e in c["env"] if e["name"] != "TRAINLET_GRACE_PERIOD"]
        del spec["terminationGracePeriodSeconds"]
        self.assertEqual(self.errors(docs), [])  # the defaults agree
        spec["terminationGracePeriodSeconds"] = 20
        self.assert_error(docs, r"above the default --grace-period")

    def test_pod_failure_policy_needs_restart_policy_never(self):
        docs = self.folder("kubeflow-torch")
        pod_spec(find(docs, "ClusterTrainingRuntime"))["restartPolicy"] = "OnFailure"
        self.assert_error(docs, r"podFailurePolicy needs the pod's restartPolicy: Never, not 'OnFailure'")

    def test_trainlet_job_without_pod_failure_policy(self):
        docs = self.folder("jobset")
        js = find(docs, "JobSet")
        del js.obj["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]
        self.assert_error(docs, r"needs a podFailurePolicy")

    def test_fail_job_on_a_retriable_code(self):
        docs = self.folder("jobset")
        rules = find(docs, "JobSet").obj["spec"]["replicatedJobs"][0]["template"]["spec"][
            "podFailurePolicy"]["rules"]
        rules[0]["onExitCodes"]["values"].append(69)
        self.assert_error(docs, r"FailJob on \[69\]: retriable codes")

    def test_ignore_on_a_worker_failure(self):
        docs = self.folder("jobset")
        rules = find(docs, "JobSet").obj["spec"]["replicatedJobs"][0]["template"]["spec"][
            "podFailurePolicy"]["rules"]
        rules[1]["onExitCodes"]["values"] = [1, 75]
        self.assert_error(docs, r"Ignore on \[1\]")

    def test_config_errors_must_fail_the_job(self):
        docs = self.folder("kubeflow-mpi")
        rt = find(docs, "ClusterTrainingRuntime")
        rules = rt.obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "podFailurePolicy"]["rules"]
        rules[0]["onExitCodes"]["values"] = [126, 127]
        self.assert_error(docs, r"does not fail the Job on \[64, 77, 78\]")

    def test_rule_names_a_missing_container(self):
        docs = self.folder("jobset")
        rules = find(docs, "JobSet").obj["spec"]["replicatedJobs"][0]["template"]["spec"][
            "podFailurePolicy"]["rules"]
        rules[0]["onExitCodes"]["containerName"] = "trainer"
        self.assert_error(docs, r"containerName 'trainer' is no container of the pod")

    def test_jobset_must_not_restart_on_config_errors(self):
        docs = self.folder("jobset")
        del find(docs, "JobSet").obj["spec"]["failurePolicy"]["rules"]
        self.assert_error(docs, r"no FailJobSet rule for onJobFailureReasons \[PodFailurePolicy\]")

    def test_init_container_copies_elsewhere(self):
        docs = self.folder("jobset")
        init = pod_spec(find(docs, "JobSet"))["initContainers"][0]
        init["command"][-1] = "/opt/trainlet/bin/trainlet"
        self.assert_error(docs, r"does not copy trainlet to /opt/trainlet/trainlet")

    def test_command_path_outside_the_volume(self):
        docs = self.folder("kubeflow-torch")
        c = container(pod_spec(find(docs, "ClusterTrainingRuntime")))
        c["command"][0] = "/usr/local/bin/trainlet"
        self.assert_error(docs, r"runs /usr/local/bin/trainlet but mounts no volume at /usr/local/bin")

    def test_init_container_of_another_image(self):
        docs = self.folder("volcano")
        pod_spec(find(docs, "Job"))["initContainers"][0]["image"] = "busybox:1.36"
        self.assert_error(docs, r"is not the trainlet image")

    def test_no_init_container(self):
        docs = self.folder("volcano")
        del pod_spec(find(docs, "Job"))["initContainers"]
        self.assert_error(docs, r"no init container copies trainlet into it")

    def test_trainlet_at_the_root_only_in_the_trainlet_image(self):
        docs = self.folder("coordinator")
        job = find(docs, "Job")
        self.assertEqual(self.errors(docs), [])
        container(pod_spec(job), "coordinator")["image"] = "docker.io/library/debian:bookworm-slim"
        self.assert_error(docs, r"runs /trainlet but mounts no volume at /")

    def test_unnamed_port(self):
        docs = self.folder("volcano")
        del container(pod_spec(find(docs, "Job")))["ports"][0]["name"]
        self.assert_error(docs, r"containerPort 29400 has no name")

    def test_volume_mount_without_volume(self):
        docs = self.folder("volcano")
        pod_spec(find(docs, "Job"))["volumes"].pop()
        self.assert_error(docs, r"volumeMount 'dshm' names no volume")

    def test_missing_config_map(self):
        docs = self.folder("jobset")
        vols = pod_spec(find(docs, "JobSet"))["volumes"]
        next(v for v in vols if "configMap" in v)["configMap"]["name"] = "my-script"
        self.assert_error(docs, r"mounts ConfigMap 'my-script', which no manifest here defines")

    def test_plain_jobset_node_count(self):
        docs = self.folder("jobset")
        c = container(pod_spec(find(docs, "JobSet")))
        set_env(c, "TRAINLET_NNODES", "3")
        self.assert_error(docs, r"TRAINLET_NNODES 3 does not match the 2 pods")
        c["env"] = [e for e in c["env"] if e["name"] != "TRAINLET_NNODES"]
        self.assert_error(docs, r"a JobSet pod needs TRAINLET_NNODES")

    def test_volcano_retries_a_config_error(self):
        docs = self.folder("volcano")
        pol = find(docs, "Job").obj["spec"]["policies"]
        pol[2]["action"] = "RestartJob"
        self.assert_error(docs, r"RestartJob on exit 78: retrying a configuration error")

    def test_volcano_exit_code_policy_after_pod_failed(self):
        docs = self.folder("volcano")
        pol = find(docs, "Job").obj["spec"]["policies"]
        pol.append({"exitCode": 71, "action": "RestartJob"})
        self.assert_error(docs, r"exitCode 71 comes after a PodFailed policy")

    def test_volcano_readiness_probe(self):
        docs = self.folder("volcano")
        container(pod_spec(find(docs, "Job")))["readinessProbe"] = {"grpc": {"port": 29401}}
        self.assert_error(docs, r"readinessProbe on trainlet: Volcano's Service publishes")

    def test_volcano_without_svc_plugin(self):
        docs = self.folder("volcano")
        del find(docs, "Job").obj["spec"]["plugins"]["svc"]
        self.assert_error(docs, r"plugin 'svc' missing")

    def test_mpi_trainjob_node_count(self):
        docs = self.folder("kubeflow-mpi")
        find(docs, "TrainJob").obj["spec"]["trainer"]["numNodes"] = 3
        self.assert_error(docs, r"TRAINLET_NNODES \(2\) must be the worker pods \(3")

    def test_mpi_key_dir(self):
        docs = self.folder("kubeflow-mpi")
        rt = find(docs, "ClusterTrainingRuntime")
        rt.obj["spec"]["mlPolicy"]["mpi"]["sshAuthMountPath"] = "/root/.ssh"
        self.assert_error(docs, r"is not where Trainer mounts the job's SSH Secret \(/root/.ssh\)")

    def test_mpi_slots(self):
        docs = self.folder("kubeflow-mpi")
        rt = find(docs, "ClusterTrainingRuntime")
        rt.obj["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] = 4
        self.assert_error(docs, r"TRAINLET_NPROC_PER_NODE 1 differs from numProcPerNode 4")

    def test_trainjob_command_without_trainlet(self):
        docs = self.folder("kubeflow-torch")
        find(docs, "TrainJob").obj["spec"]["trainer"]["command"] = ["python3", "train.py"]
        self.assert_error(docs, r"trainer.command .* must start with")

    def test_trainjob_sets_reserved_pet_variable(self):
        docs = self.folder("kubeflow-torch")
        find(docs, "TrainJob").obj["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "2"}]
        self.assert_error(docs, r"PET_NNODES is set by Trainer")

    def test_trainjob_without_its_runtime(self):
        docs = [d for d in self.folder("kubeflow-torch") if d.kind == "TrainJob"]
        self.assert_error(docs, r"runtimeRef names no runtime")

    def test_coordinator_job_id_and_nnodes_must_match(self):
        docs = self.folder("coordinator")
        c = container(pod_spec(find(docs, "JobSet")))
        set_env(c, "TRAINLET_JOB_ID", "other")
        set_env(c, "TRAINLET_NNODES", "4")
        self.assert_error(docs, r"job-id other differs from the coordinator's trainlet-elastic")
        self.assert_error(docs, r"nnodes 4 differs from the coordinator's 2:4")

    def test_coordinator_agents_must_not_host(self):
        docs = self.folder("coordinator")
        c = container(pod_spec(find(docs, "JobSet")))
        c["env"] = [e for e in c["env"] if e["name"] != "TRAINLET_HOST_COORDINATOR"]
        self.assert_error(docs, r"needs TRAINLET_HOST_COORDINATOR=no")

    def test_coordinator_service_port(self):
        docs = self.folder("coordinator")
        set_env(container(pod_spec(find(docs, "JobSet"))), "TRAINLET_COORDINATOR",
                "trainlet-coordinator:29999")
        self.assert_error(docs, r"Service trainlet-coordinator has no port 29999")

    def test_coordinator_service_needs_the_udp_liveness_port(self):
        docs = self.folder("coordinator")
        svc = find(docs, "Service")
        svc.obj["spec"]["ports"] = [p for p in svc.obj["spec"]["ports"]
                                    if p.get("protocol") != "UDP"]
        self.assert_error(docs, r"Service trainlet-coordinator has no UDP port 29400")

    def test_coordinator_in_a_deployment(self):
        # The old example: a Deployment restarts the coordinator after the job
        # ended, and the new one remembers nothing.
        docs = self.folder("coordinator")
        as_deployment(find(docs, "Job"))
        self.assert_error(docs, r"Deployment/trainlet-coordinator: `trainlet coordinator` in a "
                                r"Deployment: it exits when the job is over")

    def test_coordinator_job_must_not_restart(self):
        docs = self.folder("coordinator")
        job = find(docs, "Job")
        job.obj["spec"]["parallelism"] = 2
        self.assert_error(docs, r"parallelism and completions must be 1")
        job.obj["spec"]["parallelism"] = 1
        rules = job.obj["spec"]["podFailurePolicy"]["rules"]
        rules[0]["onExitCodes"]["values"] = [64, 78, 79]
        self.assert_error(docs, r"does not fail the coordinator's Job on \[75\]")
        rules[0]["onExitCodes"]["values"] = [64, 69, 75, 78, 79]
        self.assert_error(docs, r"FailJob on \[69\]: retriable codes")
        del job.obj["spec"]["podFailurePolicy"]
        pod_spec(job)["restartPolicy"] = "OnFailure"
        self.assert_error(docs, r"a `trainlet coordinator` Job needs restartPolicy: Never")

    def test_elastic_job_succeeds_with_min_nodes(self):
        docs = self.folder("coordinator")
        self.assertEqual(self.errors(docs), [])
        job = find(docs, "JobSet").obj["spec"]["replicatedJobs"][0]["template"]["spec"]
        job["successPolicy"]["rules"][0]["succeededCount"] = 3
        self.assert_error(docs, r"TRAINLET_NNODES 2:4 with completions 4: the Job waits for all 4 "
                                r"pods.*succeededCount: 2")
        del job["successPolicy"]
        self.assert_error(docs, r"TRAINLET_NNODES 2:4 with completions 4")
        # A fixed-size job needs every pod: no rule.
        docs = self.folder("jobset")
        self.assertEqual(self.errors(docs), [])

    def test_elastic_job_over_several_jobs(self):
        # 4 Jobs of one pod each: JobSet's successPolicy must end on the first.
        docs = self.folder("coordinator")
        js = find(docs, "JobSet").obj["spec"]
        rj = js["replicatedJobs"][0]
        rj["replicas"] = 4
        job = rj["template"]["spec"]
        job.update({"parallelism": 1, "completions": 1})
        del job["successPolicy"]
        self.assert_error(docs, r"TRAINLET_NNODES 2:4 over 4 Jobs: the JobSet waits for all")
        js["successPolicy"] = {"operator": "Any", "targetReplicatedJobs": ["node"]}
        self.assertEqual(self.errors(docs), [])

    def test_trainjob_env_is_merged_into_the_node(self):
        docs = self.folder("kubeflow-torch")
        tj = find(docs, "TrainJob")
        tj.obj["spec"]["trainer"]["env"] = [{"name": "TRAINLET_GRACE_PERIOD", "value": "120s"}]
        self.assert_error(docs, r"TrainJob/.* trainer \(merged into container node\).*"
                                r"must be at least 5 s above --grace-period 120s")
        tj.obj["spec"]["trainer"]["env"] = [{"name": "TRAINLET_NPROC_PER_NOD", "value": "2"}]
        self.assert_error(docs, r"TrainJob/.*TRAINLET_NPROC_PER_NOD is no TRAINLET_\* variable.*"
                                r"did you mean TRAINLET_NPROC_PER_NODE")

    def test_readiness_probe_on_the_health_port(self):
        docs = self.folder("jobset")
        c = container(pod_spec(find(docs, "JobSet")))
        c["readinessProbe"]["grpc"]["port"] = 29500
        self.assert_error(docs, r"readinessProbe grpc.port 29500: trainlet's health service is on "
                                r"--health-port 29401")
        c["readinessProbe"]["grpc"]["port"] = 29402
        set_env(c, "TRAINLET_HEALTH_PORT", "29402")
        self.assertEqual(self.errors(docs), [])
        set_env(c, "TRAINLET_HEALTH_PORT", "0")
        self.assert_error(docs, r"--health-port 0 turns health off")

    def test_coordinator_probe_on_its_port(self):
        docs = self.folder("coordinator")
        c = container(pod_spec(find(docs, "Job")), "coordinator")
        c["readinessProbe"]["grpc"]["port"] = 29401
        self.assert_error(docs, r"Job/trainlet-coordinator container coordinator: readinessProbe "
                                r"grpc.port 29401: .*the coordinator port 29400")

    def test_unknown_trainlet_variable(self):
        docs = self.folder("jobset")
        c = container(pod_spec(find(docs, "JobSet")))
        set_env(c, "TRAINLET_GRACE_PERIODS", "50s")
        self.assert_error(docs, r"TRAINLET_GRACE_PERIODS is no TRAINLET_\* variable trainlet reads "
                                r"\(did you mean TRAINLET_GRACE_PERIOD\?\)")

    def test_option_values_must_parse(self):
        for name, value, want in [("TRAINLET_NPROC_PER_NODE", "two", r"N\|auto\|gpu\|cpu"),
                                  ("TRAINLET_MASTER_PORT", "29500x", "an integer"),
                                  ("TRAINLET_PREFIX_OUTPUT", "maybe", "true or false"),
                                  ("TRAINLET_JOIN_TIMEOUT", "ten minutes", "a duration"),
                                  ("TRAINLET_HOST_COORDINATOR", "never", r"auto\|yes\|no")]:
            with self.subTest(name=name):
                docs = self.folder("coordinator")
                set_env(container(pod_spec(find(docs, "JobSet"))), name, value)
                self.assert_error(docs, rf"{name}='{value}' is not .*{want}.*: trainlet exits 64")

    def test_token_at_the_wrong_path(self):
        docs = self.folder("jobset")
        c = container(pod_spec(find(docs, "JobSet")))
        mount = next(m for m in c["volumeMounts"] if m["name"] == "trainlet-token")
        mount["mountPath"] = "/var/run/secrets/token"
        self.assert_error(docs, r"no token: trainlet reads /var/run/secrets/trainlet/token by "
                                r"default, but no Secret is mounted there")
        set_env(c, "TRAINLET_TOKEN_FILE", "/var/run/secrets/token/token")
        self.assertEqual(self.errors(docs), [])
        set_env(c, "TRAINLET_TOKEN_FILE", "/etc/token")
        self.assert_error(docs, r"token file /etc/token is in no Secret mounted in this container")

    def test_coordinator_token_file(self):
        docs = self.folder("coordinator")
        c = container(pod_spec(find(docs, "Job")), "coordinator")
        c["command"][2] = "--token-file=/var/run/secrets/trainlet-token/token"
        self.assert_error(docs, r"token file /var/run/secrets/trainlet-token/token is in no Secret")
        c["command"] = c["command"][:2]
        self.assert_error(docs, r"`trainlet coordinator` without --token-file")

    def test_coordinator_names_a_missing_service(self):
        docs = self.folder("coordinator")
        set_env(container(pod_spec(find(docs, "JobSet"))), "TRAINLET_COORDINATOR",
                "trainlet-coordinater:29400")
        self.assert_error(docs, r"--coordinator trainlet-coordinater:29400: no Service "
                                r"trainlet-coordinater here")
        docs = [d for d in self.folder("coordinator") if d.kind != "Service"]
        self.assert_error(docs, r"no Service trainlet-coordinator here")
        # A full name may be another namespace's Service: not checked.
        docs = self.folder("coordinator")
        set_env(container(pod_spec(find(docs, "JobSet"))), "TRAINLET_COORDINATOR",
                "coord.other-ns.svc:29400")
        self.assertEqual(self.errors(docs), [])

    def test_service_selector_and_target_port(self):
        docs = self.folder("coordinator")
        svc = find(docs, "Service")
        svc.obj["spec"]["ports"][0]["targetPort"] = "grpc"
        self.assert_error(docs, r"targetPort 'grpc' names no container port")
        svc.obj["spec"]["selector"] = {"app": "nothing"}
        self.assert_error(docs, r"selector \{'app': 'nothing'\} matches no pod template")

    def test_deployment_selector(self):
        docs = self.folder("coordinator")
        as_deployment(find(docs, "Job"))
        find(docs, "Deployment").obj["spec"]["selector"]["matchLabels"] = {"app": "x"}
        self.assert_error(docs, r"does not match the pod template's labels")

    def test_cli_fails_on_a_broken_file(self):
        import subprocess
        import sys
        import tempfile
        with open(os.path.join(HERE, "jobset", "jobset.yaml")) as f:
            obj = yaml.safe_load(f)
        obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "terminationGracePeriodSeconds"] = 10
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "broken.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(obj, f)
            cm = os.path.join(HERE, "common", "train-script.yaml")
            r = subprocess.run([sys.executable, os.path.join(HERE, "validate.py"), path, cm],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("terminationGracePeriodSeconds 10", r.stdout)

class ControllerManifestTest(ValidatorTestBase):
    """deploy/controller/: the controller's StatefulSet, its Service, and the
    Prometheus objects that watch it."""

    def controller(self, docs):
        return container(pod_spec(find(docs, "StatefulSet")), "controller")

    def test_one_replica_and_the_history_on_a_claim(self):
        docs = self.folder("controller")
        find(docs, "StatefulSet").obj["spec"]["replicas"] = 2
        self.assert_error(docs, r"replicas must be 1")
        docs = self.folder("controller")
        c = self.controller(docs)
        c["command"] = [a for a in c["command"] if not a.startswith("--db=")]
        self.assert_error(docs, r"without --db keeps its history in memory")
        docs = self.folder("controller")
        c = self.controller(docs)
        c["command"] = [("--db=/tmp/history.db" if a.startswith("--db=") else a)
                        for a in c["command"]]
        self.assert_error(docs, r"--db /tmp/history.db is on no volumeClaimTemplate's volume")
        docs = self.folder("controller")
        find(docs, "StatefulSet").obj["spec"]["serviceName"] = "nope"
        self.assert_error(docs, r"serviceName 'nope' names no Service here")

    def test_views_token_in_a_secret(self):
        docs = self.folder("controller")
        c = self.controller(docs)
        c["command"] = [a for a in c["command"] if not a.startswith("--http-token-file")]
        self.assert_error(docs, r"without --http-token-file serves every job's commands")
        docs = self.folder("controller")
        c = self.controller(docs)
        c["command"] = [("--http-token-file=/etc/views-token" if a.startswith("--http-token-file")
                         else a) for a in c["command"]]
        self.assert_error(docs, r"--http-token-file /etc/views-token is in no Secret")
        docs = self.folder("controller")
        c = self.controller(docs)
        c["command"] = [a for a in c["command"] if not a.startswith("--token-file")]
        self.assert_error(docs, r"`trainlet controller` without --token-file")

    def test_probes_on_healthz_or_the_grpc_port(self):
        docs = self.folder("controller")
        c = self.controller(docs)
        c["readinessProbe"]["httpGet"]["path"] = "/api/jobs"
        self.assert_error(docs, r"readinessProbe httpGet path '/api/jobs': probe /healthz")
        docs = self.folder("controller")
        c = self.controller(docs)
        c["readinessProbe"]["httpGet"]["port"] = "grpc"
        self.assert_error(docs, r"readinessProbe httpGet port 'grpc' is not the views' port 29680")
        docs = self.folder("controller")
        c = self.controller(docs)
        c["livenessProbe"]["grpc"]["port"] = 29680
        self.assert_error(docs, r"livenessProbe grpc.port 29680: .* the controller's gRPC port 29600")
        # With TLS the gRPC port wants a client certificate: no probe reaches it.
        docs = self.folder("controller")
        c = self.controller(docs)
        c["command"].append("--tls-dir=/var/run/secrets/trainlet")
        self.assert_error(docs, r"with TLS its gRPC port answers only clients with a certificate")

    def test_tls_key_not_readable_by_others(self):
        docs = self.folder("controller")
        spec = pod_spec(find(docs, "StatefulSet"))
        c = self.controller(docs)
        spec["volumes"].append({"name": "tls", "secret": {"secretName": "controller-tls"}})
        c["volumeMounts"].append({"name": "tls", "mountPath": "/etc/trainlet/tls",
                                  "readOnly": True})
        c["command"].append("--tls-dir=/etc/trainlet/tls")
        c.pop("livenessProbe")
        self.assert_error(docs, r"the TLS key /etc/trainlet/tls/tls.key is mounted with mode 0644")
        spec["volumes"][-1]["secret"]["defaultMode"] = 0o440
        self.assertEqual(self.errors(docs), [])

    def test_service_monitor_port_selector_and_token(self):
        docs = self.folder("controller")
        find(docs, "ServiceMonitor").obj["spec"]["endpoints"][0]["port"] = "web"
        self.assert_error(docs, r"endpoint port 'web' is no port of Service trainlet-controller")
        docs = self.folder("controller")
        find(docs, "ServiceMonitor").obj["spec"]["endpoints"][0].pop("authorization")
        self.assert_error(docs, r"wants a token on /metrics \(--http-token-file\)")
        docs = self.folder("controller")
        find(docs, "ServiceMonitor").obj["spec"]["selector"]["matchLabels"] = {"app": "x"}
        self.assert_error(docs, r"matches the labels of no Service here")
        docs = self.folder("controller")
        find(docs, "ServiceMonitor").obj["spec"]["endpoints"][0]["intervall"] = "15s"
        self.assert_error(docs, r"schema: spec.endpoints.0: Additional properties")

    def test_alerts_name_served_metrics_and_rate_only_counters(self):
        docs = self.folder("controller")
        rules = find(docs, "PrometheusRule").obj["spec"]["groups"][0]["rules"]
        rules[0]["expr"] = "increase(trainlet_job_hang_total[15m]) > 0"
        self.assert_error(docs, r"rule TrainletJobHung: trainlet_job_hang_total is no metric the "
                                r"controller serves \(did you mean trainlet_job_hangs_total\?\)")
        docs = self.folder("controller")
        rules = find(docs, "PrometheusRule").obj["spec"]["groups"][0]["rules"]
        rules[0]["expr"] = "rate(trainlet_job_progress_step[5m]) == 0"
        self.assert_error(docs, r"rate\(trainlet_job_progress_step\): .* is a gauge; use deriv")

    def test_alert_rules_pass_promtool(self):
        import shutil
        import subprocess
        import sys
        if shutil.which("promtool") is None:
            self.skipTest("promtool is not installed (apt-get install prometheus)")
        r = subprocess.run([sys.executable, os.path.join(HERE, "check_rules.py")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("promtool test rules: ok", r.stdout)


if __name__ == "__main__":
    unittest.main()
