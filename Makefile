# `make demo` creates .venv and installs what the demo runs: vprom with pyarrow (the VLM
# export's Parquet); `make test` installs vprom with its test extra. Each install has its stamp, so `make test` after
# `make demo` still installs the test extra.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.installed-test-stamp
DEMO_OUT ?= build/demo
D := $(DEMO_OUT)
# The relation network with the auxiliary loss on every feature source. The demo's settings
# (not `train`'s defaults, which are the paper's for 2048-d features on VG): a narrower network,
# Adam on a cosine schedule and batches of 128, so that it learns on 2 cores within minutes, on
# centred features (random-weight features share one large direction).
DEMO_EPOCHS ?= 6
# matrices per crop (`build --scale`): the relation network's accuracy follows the number of
# training problems, the features' cost the number of crops; at 0.4 (94,000 matrices, about as
# many crops as at 0.1) it reaches 85% on labels in 6 epochs (docs/perception.md)
DEMO_SCALE ?= 0.4
DEMO_TRAIN ?= --epochs $(DEMO_EPOCHS) --hidden 128 --optimizer adam --lr 6e-3 \
	--lr-schedule cosine --score-init 1 --batch-size 128 --center-features
# the held-out split on which the labels run shows the drop from neutral
DEMO_HELD_OUT ?= held_out_attributes
# the perception model: timm's resnet10t from random weights on the neutral training crops at
# 64 px, 6 epochs of batch 32 (735 steps), its learning rate falling on a cosine from 4e-3; it
# runs as fast as resnet18's 4 epochs and predicts labels that the relation network reads better
# (docs/perception.md); the random-weights source is the same network untrained
PERCEIVE_BACKBONE ?= timm:resnet10t
P := $(lastword $(subst :, ,$(PERCEIVE_BACKBONE)))
PERCEIVE_SIZE ?= 64
PERCEIVE_EPOCHS ?= 6
PERCEIVE_BATCH ?= 32
PERCEIVE_LR ?= 4e-3
# The demo's steps run DEMO_JOBS at a time, each on its share of the cores
# (torch's threads): on 2 cores two one-thread jobs finish sooner than one two-thread job after
# another, as loading data and evaluating are single-threaded.
DEMO_JOBS ?= 2
DEMO_THREADS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n > $(DEMO_JOBS) ? n / $(DEMO_JOBS) : 1 )))
VPROM := $(BIN)/vprom

.PHONY: demo demo-steps test test-slow install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[hf]'
	touch $(STAMP)

$(TEST_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP) $(TEST_STAMP)

# The whole pipeline on the synthetic corpus (docs/perception.md), DEMO_JOBS steps at a time:
# build (synthetic corpus -> mine -> generate -> verify -> stats); three feature sources:
# labels (perfect perception), resnet10t on 64 px crops with random weights, and the labels
# that resnet10t, trained on the corpus's labels by `vprom perceive`, predicts; the relation
# network with aux on each on neutral, on labels on one held-out split too; the two controls
# expected at chance (the relation network on shuffled context panels, the context-blind
# model), on labels; each run evaluated; one rendered matrix, a small human study and the VLM
# export; last the report, which prints the perception table and the verdict.
demo: $(STAMP)
	OMP_NUM_THREADS=$(DEMO_THREADS) $(MAKE) --no-print-directory -j$(DEMO_JOBS) \
		--output-sync=target demo-steps
	@echo "a 20-problem human study: $(VPROM) human-serve $(D)/study, then open"
	@echo "  http://127.0.0.1:8000/?participant=me (docs/human-study.md)"
	@echo "the data set: $(D)/dataset.h5 (stats: $(D)/stats.json); a matrix: $(D)/matrix-0.png"
	@echo
	$(VPROM) report $(D)/runs --out $(D)/report

# The runs, longest chain first (perceive -> its features -> its run), so that make starts it
# first and fills the other job with the rest.
DEMO_RUNS := perceive/rn-aux-neutral labels/rn-aux-neutral labels/rn-aux-$(DEMO_HELD_OUT) \
	controls/rn-aux-shuffled-context random/rn-aux-neutral controls/context-blind
demo-steps: $(DEMO_RUNS:%=$(D)/runs/%/metrics.json) $(D)/matrix-0.png $(D)/study $(D)/vlm

# Every step runs its command, which resumes, does nothing when done, or redoes what changed
# settings make stale (`vprom build` at another scale): the build is phony, and every step
# depends on it.
.PHONY: $(D)/dataset.h5
$(D)/dataset.h5:
	$(VPROM) build --synthetic --scale $(DEMO_SCALE) --out $(D)
$(DEMO_RUNS:%=$(D)/runs/%/metrics.json): $(D)/dataset.h5

$(D)/matrix-0.png: $(D)/dataset.h5
	$(VPROM) show $< --id 0 --vg $(D)/vg --answer --out $@
# made once (order-only on the build): a study folder collects its participants' responses, and
# `human-study` writes only into a new or empty folder
$(D)/study: | $(D)/dataset.h5
	$(VPROM) human-study $(D)/dataset.h5 --vg $(D)/vg --n 20 --out $@
$(D)/vlm: $(D)/dataset.h5
	$(VPROM) export $< --format vlm --vg $(D)/vg --limit 20 --out $@
$(D)/features/labels.h5: $(D)/dataset.h5
	$(VPROM) extract $< --backbone labels --out $@
$(D)/features/$(P).h5: $(D)/dataset.h5
	$(VPROM) extract $< --vg $(D)/vg --backbone $(PERCEIVE_BACKBONE) --weights none \
		--input-size $(PERCEIVE_SIZE) --out $@
$(D)/perceive/$(P).pt: $(D)/dataset.h5
	$(VPROM) perceive $< --vg $(D)/vg --split neutral --backbone $(PERCEIVE_BACKBONE) \
		--weights none --input-size $(PERCEIVE_SIZE) --epochs $(PERCEIVE_EPOCHS) \
		--batch-size $(PERCEIVE_BATCH) --lr $(PERCEIVE_LR) --out $@
# the perception model's predicted labels (its heads' probabilities), the counterpart of labels
$(D)/features/perceive-$(P).h5: $(D)/perceive/$(P).pt $(D)/dataset.h5
	$(VPROM) extract $(D)/dataset.h5 --vg $(D)/vg --backbone $(PERCEIVE_BACKBONE) --weights $< \
		--input-size $(PERCEIVE_SIZE) --pool heads --out $@

# A run: train (resumable) on the rule's features, then evaluate on the test problems.
TRAIN = $(VPROM) train $(D)/dataset.h5 --features $< $(DEMO_TRAIN) --out $(@D)
EVALUATE = $(VPROM) evaluate $(@D)
$(D)/runs/labels/rn-aux-neutral/metrics.json: $(D)/features/labels.h5
	$(TRAIN) --split neutral --model rn --aux
	$(EVALUATE)
$(D)/runs/labels/rn-aux-$(DEMO_HELD_OUT)/metrics.json: $(D)/features/labels.h5
	$(TRAIN) --split $(DEMO_HELD_OUT) --model rn --aux
	$(EVALUATE)
$(D)/runs/perceive/rn-aux-neutral/metrics.json: $(D)/features/perceive-$(P).h5
	$(TRAIN) --split neutral --model rn --aux
	$(EVALUATE)
$(D)/runs/random/rn-aux-neutral/metrics.json: $(D)/features/$(P).h5
	$(TRAIN) --split neutral --model rn --aux
	$(EVALUATE)
$(D)/runs/controls/rn-aux-shuffled-context/metrics.json: $(D)/features/labels.h5
	$(TRAIN) --split neutral --model rn --aux --shuffle-context
	$(EVALUATE)
$(D)/runs/controls/context-blind/metrics.json: $(D)/features/labels.h5
	$(TRAIN) --split neutral --model context-blind
	$(EVALUATE)

# Both cores (pytest-xdist); the heavier checks marked `slow` (a wheel in a fresh venv, numpy
# 1.x, every docs snippet, end-to-end grids) run in `make test-slow`, and CI runs both.
test: $(TEST_STAMP)
	$(BIN)/pytest -q -n auto -m "not slow"

test-slow: $(TEST_STAMP)
	$(BIN)/pytest -q -n auto -m slow

clean:
	rm -rf build .pytest_cache
