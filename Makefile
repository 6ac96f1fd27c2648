# Storage fabric: ZFS + LIO iSCSI for GPU clusters.  `make help` lists the targets.
#
# The two set-up commands of the README:
#   make demo   boot the lab and run the fabric on it
#   make test   all tests (unit, then integration on the lab)
# Both install what they need themselves (Debian packages, a virtualenv, pinned pip packages).

SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
PYTHON       ?= python3
VENV         ?= .venv
PY           := $(VENV)/bin/python
LABCTL       := $(PYTHON) lab/labctl.py
PYTEST       := tests/run-pytest $(PY)
STORAGE2     ?=
DEBIAN       ?=
SHUFFLE      ?=
LEVERS       ?=
ARGS         ?=
# integration tests in SHARDS pytest runs at once, each on a lab of its own (tests/run-shards; 1: one run, one lab)
SHARDS       ?= 2
# Every target here runs on the lab: its Ansible runs open the lab's vault (password committed, public), by
# this variable only: ansible.cfg loads no vault secret, since it serves production inventories too.
export ANSIBLE_VAULT_IDENTITY_LIST := lab@$(CURDIR)/inventory/lab/vault-password.txt

.DEFAULT_GOAL := help
.PHONY: help demo test unit integration collection venv host-deps lab-up lab-down lab-status lab-image bench-site bench-manifest bench-versions bench-versions-lab bench-publish bench-checkpoint bench-zvol-mq bench-replication bench-multipath bench-read bench-read-profile bench-read-levers bench-native bench-prolog bench-grant bench-storm bench-csi lab-panic-repro lint docs lock clean test-tools

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

demo: venv lab-up ## boot the lab, converge site.yml, print the fabric, publish a sample dataset with fabricctl
	@echo "== site.yml: storage nodes (ZFS, pools, datasets, LIO), then GPU nodes (initiators, ro mounts) =="
	$(VENV)/bin/ansible-playbook playbooks/site.yml
	@echo "== the fabric: pools, datasets and exports on storage nodes; sessions and mounts on GPU nodes =="
	$(VENV)/bin/ansible-playbook playbooks/report.yml
	@echo "== fabricctl on storage1: a sample dataset created, ingested, sealed, published to gpu1 and gpu2, read, verified =="
	lab/demo-datasets.sh
	@echo "== fabricctl on storage1: a job's checkpoint volume, snapshots, a rotation plan, a restore to gpu1 and gpu2 =="
	lab/demo-checkpoints.sh
	@echo "== Slurm (issue 29): the lab's Slurm with the fabric's SPANK plugin; a job on gpu1 and gpu2 reads a version and verifies it =="
	$(VENV)/bin/ansible-playbook playbooks/lab-slurm.yml
	lab/demo-slurm.sh
	@echo "== lab is still up: 'make lab-status', 'python3 lab/labctl.py ssh gpu1', 'make lab-down' =="

test: host-deps ## all tests: unit (seconds, no root) and linters (make lint) beside integration on the lab VMs (root) in SHARDS=2 runs on two labs at once; SHUFFLE=SEED shuffles the files, DEBIAN=12 runs them on Debian 12 guests
	@# the guest image (when not cached: about 7-15 minutes, mostly ZFS's DKMS build) is built first, beside the
	@# virtualenv's set-up and the unit tests and linters; each shard's own image step then waits for it (one build
	@# per cache). labctl needs only the system's Python.
	@$(LABCTL) image $(if $(DEBIAN),--debian $(DEBIAN)) > .lab-image-build.log 2>&1 & \
		echo "lab image: found or built in the background (log: .lab-image-build.log)"
	$(MAKE) --no-print-directory venv test-tools
	@# the unit tests and linters (about 3 minutes of one core) run beside the labs' boot instead of before it, their
	@# lines prefixed [checks]; the run fails when they or a shard fail (docs/testing.md)
	@# (a subshell: `$$!` of a pipeline sent to the background is its last command's, sed's; the subshell's status is
	@# the pipeline's, the checks' own under pipefail)
	@(set -o pipefail; $(MAKE) --no-print-directory unit lint 2>&1 | sed -u 's/^/[checks] /') & pid=$$!; \
	shards=0; $(if $(DEBIAN),FABRIC_LAB_DEBIAN=$(DEBIAN)) tests/run-shards $(SHARDS) $(PY) -v --durations=60 $(if $(SHUFFLE),--shuffle-files $(SHUFFLE)) || shards=$$?; \
	checks=0; wait $$pid || checks=$$?; \
	echo "make test: unit tests and linters $$([ $$checks = 0 ] && echo passed || echo FAILED), integration $$([ $$shards = 0 ] && echo passed || echo FAILED)"; \
	[ $$checks = 0 ] && [ $$shards = 0 ]

unit: venv test-tools ## unit tests only
	$(PYTEST) tests/unit -q

integration: venv ## integration tests only, in SHARDS=2 runs on two labs at once (SHARDS=1: one run, on the lab that is up if FABRIC_LAB_REUSE=1); SHUFFLE=SEED shuffles the files
	$(if $(DEBIAN),FABRIC_LAB_DEBIAN=$(DEBIAN)) tests/run-shards $(SHARDS) $(PY) -v --durations=60 $(if $(SHUFFLE),--shuffle-files $(SHUFFLE))

host-deps:
	@tests/host-deps.sh

test-tools: venv ## promtool and sanoid for the unit tests, out of Debian's packages into the virtualenv (tests/test-tools.sh)
	@tests/test-tools.sh $(VENV)

venv: $(VENV)/.installed ## the controller virtualenv (pinned by requirements/constraints.txt)

$(VENV)/.installed: requirements/dev.in requirements/constraints.txt pyproject.toml | host-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/dev.in
	$(PY) -m pip install -q --no-deps -e .
	tests/test-tools.sh $(VENV)
	touch $@

lab-up: ## boot the lab (STORAGE2=1 adds storage2, DEBIAN=12 for Debian 12 guests); re-running converges a half-up lab
	$(LABCTL) up $(if $(STORAGE2),--storage2) $(if $(DEBIAN),--debian $(DEBIAN))

lab-down: ## stop the lab: VMs, taps, bridge and namespace (and the labs of make test's shard copies, if any are left up)
	$(LABCTL) down
	@tests/run-shards --down

lab-status: ## what is up
	$(LABCTL) status

lab-panic-repro: ## issue 27: reproduce the storage node's panics per emulation profile (PROFILES=multi:2,single:2,multi:1 RUNS=N), a VM of its own beside the lab -> docs/lab.md, bench/results/panic.json
	$(PYTHON) lab/panic_repro.py $(if $(PROFILES),--profiles $(PROFILES)) $(if $(RUNS),--runs $(RUNS))

lab-image: ## build (or find) the cached guest image only (DEBIAN=12 for Debian 12)
	$(LABCTL) image $(if $(DEBIAN),--debian $(DEBIAN))

bench-site: venv ## issue 10 benchmark on fresh labs: site.yml first, converged re-run, check (with and without Mitogen) -> docs/benchmarks.md, bench/results/site.json
	$(PY) bench/site_bench.py

bench-manifest: venv ## issue 4 benchmark on the host: manifest of 1,000,000 small files vs find|xargs sha256sum -> docs/benchmarks.md
	$(PY) bench/manifest_bench.py

bench-versions: venv ## issue 31 benchmark on the host: seal after 1% of 1,000,000 files changed, incremental vs full; diff of two 1M-entry manifests -> docs/benchmarks.md, bench/results/versions.json
	$(PY) bench/versions_bench.py

bench-versions-lab: venv ## issue 31 benchmark on the running lab: fabricctl dataset seal after 1% of 100,000 files changed, incremental vs --full (ROUNDS=N; ARGS=--cleanup-only removes a kept dataset) -> docs/benchmarks.md, bench/results/versions.json
	$(PY) bench/versions_lab_bench.py $(if $(ROUNDS),--rounds $(ROUNDS)) $(ARGS)

bench-publish: venv ## issue 4 benchmark on the running lab: fabricctl publish of 1 and 4 GiB vs rsync to gpu1+gpu2 -> docs/benchmarks.md, bench/results/publish.json
	$(PY) bench/publish_bench.py

bench-zvol-mq: venv ## issue 17 benchmark on the running lab: zvol reads with zvol_use_blk_mq 0 and 1 on storage1 -> docs/benchmarks.md
	$(PY) bench/zvol_mq_bench.py

bench-multipath: venv ## issue 13 benchmark on the running lab with storage2: gpu1+gpu2 reads from one storage node vs two, read stalls with one path vs two while storage1 reboots -> docs/benchmarks.md, bench/results/multipath.json (+ stall figures in replication.json)
	$(PY) bench/multipath_bench.py

bench-replication: venv ## issue 13 benchmark on the running lab with storage2: fabricctl replicate vs zfs send|ssh|receive vs syncoid (1 and 4 GiB), incremental -> docs/benchmarks.md, bench/results/replication.json
	$(PY) bench/replication_bench.py

bench-read: venv ## issue 14 benchmark on the running lab: a data loader on gpu1 over iSCSI (ext4, xfs), NFS and a local copy, epochs from a cold ARC, fabricctl warm, fio -> docs/benchmarks.md, bench/results/read.json
	$(PY) bench/read_bench.py

bench-read-profile: venv ## issue 14 benchmark on the running lab: where a read's CPU goes (each VM's QEMU CPU time, warm reads over iSCSI and from a local copy) -> docs/benchmarks.md, bench/results/read_profile.json
	$(PY) bench/read_bench.py --profile

bench-read-levers: venv ## issue 14 benchmark on the running lab: read-path levers (block queue, SCSI queue depth, iSCSI PDU sizes, ZFS prefetch, volblocksize), one at a time (A B A B); LEVERS=a,b for some, ROUNDS=N -> docs/benchmarks.md, bench/results/read_levers.json
	$(PY) bench/read_levers.py $(if $(LEVERS),--levers $(LEVERS)) $(if $(ROUNDS),--rounds $(ROUNDS))

bench-native: venv ## issue 27 benchmark on the running lab (root): the target read by a native initiator (libiscsi's iscsi-perf on the host, as gpu1 with its CHAP) against storage1 reading the same snapshot device, seq 1 MiB and random 128 KiB at 32 in flight, A B A B; LEVERS=attrib.NAME=V,zfs.NAME=V, ROUNDS=N -> docs/benchmarks.md, bench/results/native_read.json
	$(PY) bench/native_read_bench.py $(if $(LEVERS),--levers $(LEVERS)) $(if $(ROUNDS),--rounds $(ROUNDS))

bench-prolog: venv ## issue 29 benchmark on the running lab (with its Slurm: playbooks/lab-slurm.yml): seconds a --fabric-dataset request adds to a job's start on 1 and 2 nodes (ROUNDS=N) -> docs/benchmarks.md, bench/results/attach.json
	$(PY) bench/bench_prolog.py $(if $(ROUNDS),--rounds $(ROUNDS))

bench-grant: venv ## issue 29 benchmark on the running lab: the grant path to 500 synthetic hosts vs rtslib making the same ACLs + one save, a 501st host vs one save (ROUNDS=N) -> docs/benchmarks.md, bench/results/attach.json
	$(PY) bench/grant_bench.py $(if $(ROUNDS),--rounds $(ROUNDS))

bench-storm: venv ## issue 29 benchmark on the running lab: 64 granted initiators (open-iscsi ifaces with their own names and CHAP, 32 on gpu1, 32 on gpu2) logging in at once vs one login (ROUNDS=N; ARGS=--cleanup-only) -> docs/benchmarks.md, bench/results/attach.json
	$(PY) bench/storm_bench.py $(if $(ROUNDS),--rounds $(ROUNDS)) $(ARGS)

bench-csi: venv ## issue 30 benchmark on the running lab (the node plugin on gpu1: gpu.yml --tags agent -e fabric_node_csi=true): NodeStage+NodePublish over the plugin's socket vs the agent's attach alone (ROUNDS=N) -> docs/benchmarks.md, bench/results/csi.json
	$(PY) bench/csi_bench.py $(if $(ROUNDS),--rounds $(ROUNDS))

bench-checkpoint: venv ## issue 5 benchmark on the running lab: rotate vs sanoid, checkpoint list vs zfs list, freeze window -> docs/benchmarks.md
	$(PY) bench/checkpoint_bench.py

lint: venv ## ruff, ansible-lint (production profile) and ansible-test sanity on the built collection (docs/testing.md, "Linters")
	$(VENV)/bin/ruff check lab fabricctl fabric_node fabric_csi tests plugins bench
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/ansible-lint -q
	tests/sanity/run.sh $(VENV)

collection: venv ## build the Ansible collection gpufabric.storage -> build/gpufabric-storage-VERSION.tar.gz (README.md)
	$(VENV)/bin/ansible-galaxy collection build --force --output-path build

docs: venv ## regenerate docs/fabricctl-reference.md from fabricctl's parser (a unit test fails while it is stale)
	$(PY) -m fabricctl.reference docs/fabricctl-reference.md

lock: ## re-pin requirements/constraints.txt from requirements/dev.in
	rm -rf $(VENV).lock && $(PYTHON) -m venv $(VENV).lock
	$(VENV).lock/bin/pip install -q -r requirements/dev.in
	{ sed -n '1,2p' requirements/constraints.txt; $(VENV).lock/bin/pip freeze; } > requirements/constraints.txt.new
	mv requirements/constraints.txt.new requirements/constraints.txt; rm -rf $(VENV).lock

clean: ## remove the virtualenv and caches (not the lab image cache)
	rm -rf $(VENV) .pytest_cache build *.egg-info
