# The ElasticPS wire protocol. Every ZeroMQ message is one Envelope (frame 0,
# a flat Cap'n Proto message) followed by zero or more raw byte frames that
# carry tensor chunks; a ChunkRef names its frame by index, so tensor bytes are
# never copied into or out of the Cap'n Proto message.
#
# Field numbers only grow; new fields go at the end with defaults.
@0xf28c856c8d04215e;

$import "/capnp/c++.capnp".namespace("eps::wire");

const protocolVersion :UInt16 = 1;

struct Envelope {
  version @0 :UInt16;
  token @1 :Text;     # the job's secret; checked where a job requires one
  body :union {
    error @2 :ErrorReply;
    registerWorker @3 :RegisterWorker;
    registerWorkerReply @4 :RegisterWorkerReply;
    registerShard @5 :RegisterShard;
    shardConfig @6 :ShardConfig;
    stepRequest @7 :StepRequest;
    stepPlan @8 :StepPlan;
    stepDone @9 :StepDone;
    push @10 :Push;
    pushReply @11 :PushReply;
    pull @12 :Pull;
    pullReply @13 :PullReply;
    evalResult @14 :EvalResult;
    shutdown @15 :Shutdown;
    heartbeat @16 :Heartbeat;
    leave @17 :Leave;
    rollback @18 :Rollback;
    rollbackDone @19 :RollbackDone;
    retain @20 :Retain;
    poolRequest @21 :PoolRequest;
    poolAssign @22 :PoolAssign;
    jobInfo @23 :JobInfo;
    jobInfoReply @24 :JobInfoReply;
    jobStatusRequest @25 :JobStatusRequest;
    jobStatusReply @26 :JobStatusReply;
    jobControl @27 :JobControl;
    fetchModel @28 :FetchModel;
    fetchModelReply @29 :FetchModelReply;
    reshard @30 :Reshard;
    reshardReady @31 :ReshardReady;
    moveRequest @32 :MoveRequest;
    moveReply @33 :MoveReply;
  }
}

struct ErrorReply {
  code @0 :UInt16;    # eps::StatusCode
  message @1 :Text;
}

struct TensorSpec {
  name @0 :Text;
  kind @1 :UInt8;     # eps::TensorKind
  dtype @2 :UInt8;    # eps::DType
  shape @3 :List(Int64);
  sparse @4 :Bool;    # a sparse table (a parameter [rows, dim] stepped row by row, docs/design.md)
}

struct OptimizerSpec {
  kind @0 :Text;      # sgd | adam | adamw
  lr @1 :Float64;
  momentum @2 :Float64;
  dampening @3 :Float64;
  nesterov @4 :Bool;
  weightDecay @5 :Float64;
  beta1 @6 :Float64;
  beta2 @7 :Float64;
  eps @8 :Float64;
  schedule @9 :Text;  # constant | step | cosine
  stepSize @10 :Int64;
  gamma @11 :Float64;
  warmupSteps @12 :Int64;
  minLr @13 :Float64;
}

struct JobSpec {
  jobId @0 :Text;
  model @1 :Text;
  dataDir @2 :Text;
  virtualWorkers @3 :UInt32;
  batchPerVw @4 :UInt32;
  seed @5 :UInt64;
  steps @6 :Int64;
  threads @7 :UInt32;      # intra-op threads of every worker: part of the bits
  optimizer @8 :OptimizerSpec;
  trainLimit @9 :Int64;    # use the first N training samples (0 = all)
  testLimit @10 :Int64;    # evaluate on the first N test samples (0 = all, -1 = none)
  chunkElems @11 :Int64;
  numShards @12 :UInt32;
  evalBatch @13 :UInt32;
  allowMixedDevices @14 :Bool = false;  # accept workers of another device kind than the first
                                        # worker's (CPU and GPU, two GPU models): the bits then
                                        # depend on placement
  gradWireDtype @15 :UInt8 = 0;         # eps::WireDType of pushed gradients (and the loss):
                                        # 0 fp32, 1 bf16, 2 fp16; every tree node is rounded to it
  weightWireDtype @16 :UInt8 = 0;       # eps::WireDType in which workers pull parameters
  modelSha256 @17 :Text;   # SHA-256 (hex) of a TorchScript model file; empty: a built-in model
  trainData @18 :Text;     # the training features file (empty: Fashion-MNIST IDX in dataDir)
  trainLabels @19 :Text;   # its labels file (NPY, IDX); empty for CSV (a column)
  testData @20 :Text;
  testLabels @21 :Text;
  dataFormat @22 :Text;    # "idx" | "npy" | "csv"; empty: from the file's extension
  labelColumn @23 :Text;   # CSV: the label column's header name
  initSha256 @24 :Text;    # SHA-256 of the --init_from model the job starts from; empty: fresh
  reinit @25 :Text;        # regex: tensors of --init_from that start afresh instead
  freeze @26 :Text;        # regex: tensors that are not trained (no gradient, no push, no step)
  initAllowMismatch @27 :Bool = false;  # start even when no tensor of --init_from matches
  textColumn @28 :Text;    # TSV/JSONL text data: the text column's name
  seqLen @29 :UInt32;      # text models: tokens per sample (longer texts are truncated)
  vocabSize @30 :UInt32;   # text models: the vocabulary's size, special tokens included
  modelDim @31 :UInt32;    # zoo models: width (text_transformer's embedding size)
  modelLayers @32 :UInt32; # zoo models: encoder layers (text_transformer)
  modelHeads @33 :UInt32;  # zoo models: attention heads (text_transformer)
  modelDepth @34 :UInt32;  # zoo models: depth (resnet: 6n+2 layers, e.g. 20)
  cpuKernels @35 :Text = "x86-64-v3";  # the CPU kernel set of every CPU worker (common/cpu_kernels.h)
  sparseOptimizer @36 :Text = "lazy";  # sparse=True tables: lazy (row-wise) or exact (dense tensors)
  shardMemoryMb @37 :UInt64;           # each shard's memory for its sparse tables' rows (0: 256 MiB)
  hashBuckets @38 :UInt32;             # text models: words hashed into this many table rows (0: a vocabulary)
  workerTableMb @39 :UInt64;           # a sparse table of more MiB is looked up by batch on workers (0: 1024)
}

struct RegisterWorker {
  host @0 :Text;
  pid @1 :UInt32;
  deviceKind @2 :Text = "cpu";  # what the worker computes on: "cpu" or "cuda:<GPU name>". Workers
                                # from before this field ran on CPU only.
  metricsAddress @3 :Text;        # "host:port" of its Prometheus /metrics; empty: none
  cpuKernels @4 :Text;            # the CPU kernels it runs: the job's set's name, or what runs instead
}

struct RegisterWorkerReply {
  worker @0 :UInt32;
  spec @1 :JobSpec;
  shardAddresses @2 :List(Text);  # index = shard id
  modelBytes @3 :Data;            # the TorchScript model file (spec.modelSha256); empty: built-in
  initBytes @4 :Data;             # the --init_from model file (spec.initSha256); empty: none
  vocab @5 :Data;                 # text models: the vocabulary built from the training split
  # Since FetchModel: modelBytes and initBytes stay empty and the worker fetches
  # the files (spec.modelSha256, spec.initSha256) in chunks of at most
  # fetchChunkBytes each (docs/design.md, "How the model reaches the workers").
  modelSize @6 :UInt64;           # bytes of the TorchScript model file (0: built-in model)
  initSize @7 :UInt64;            # bytes of the --init_from file (0: none)
  fetchChunkBytes @8 :UInt64;     # the largest `length` a FetchModel may ask
  map @9 :ShardMap;               # who holds what (absent: the first map of spec.numShards shards);
                                  # shardAddresses then has map's id bound entries, "" for an id
                                  # that is not in it
}

struct RegisterShard {
  shard @0 :UInt32;
  address @1 :Text;
  durableStep @2 :Int64 = -1;     # newest checkpoint in the shard's store (-1: none). A shard that
                                  # restarts on a store restores that checkpoint before it registers:
                                  # it then serves version durableStep and awaits the job's decision.
  version @3 :Int64 = -1;         # the version the shard serves now (-1: before its initial values).
                                  # A shard re-sends RegisterShard every second as a beacon, so a
                                  # restarted coordinator learns every shard and where it stands; a
                                  # beacon from a known shard on the same peer changes nothing.
  metricsAddress @4 :Text;        # "host:port" of its Prometheus /metrics; empty: none
}

struct ShardConfig {
  spec @0 :JobSpec;
  tensors @1 :List(TensorSpec);   # the chunks follow from these by MakeLayout
  timeline @2 :UInt64;            # the job's timeline now (see StepPlan.timeline)
  map @3 :ShardMap;               # who holds what; absent: the first map of spec.numShards shards
}

# Who holds what (common/shard_map.h): each chunk's shard, and the shard of each
# of the 4096 row partitions of the sparse tables (row r lies in r % 4096).
struct ShardMap {
  generation @0 :UInt64;
  chunkOwners @1 :List(UInt16);   # by chunk id
  partitionOwners @2 :List(UInt16);
}

struct StepRequest {
  worker @0 :UInt32;
  doneStep @1 :Int64;             # last step this worker finished its part of (-1: none)
  tensors @2 :List(TensorSpec);   # the worker's model layout (first request only)
  trainSamples @3 :Int64;         # sizes of the data sets it loaded (first request only)
  testSamples @4 :Int64;
  abandoned @5 :Bool;             # the previous plan was given up (a shard refused or vanished):
                                  # its work is not done and goes back to the pool
  secondsPerVw @6 :Float64;       # measured compute time per VW in the previous train plan (0: none)
  dataFingerprint @7 :Text;       # what identifies the data files it loaded (first request only)
}

struct StepPlan {
  kind @0 :Kind;
  step @1 :Int64;
  epoch @2 :UInt64;
  vwLo @3 :UInt32;                # train: VWs [vwLo, vwHi)
  vwHi @4 :UInt32;
  evalLo @5 :Int64;               # eval: test samples [evalLo, evalHi) at version `step`
  evalHi @6 :Int64;
  timeline @7 :UInt64;            # the job's timeline: 1, plus one per rollback. The pulls made for
                                  # the plan carry it, and a shard on a later timeline refuses them at
                                  # once (Aborted) instead of holding them for a version that the
                                  # abandoned future would have reached
  enum Kind {
    wait @0;                      # nothing to do yet; ask again
    init @1;                      # push the initial parameters and buffers as version 0
    train @2;
    eval @3;
    stop @4;                      # the job is over: exit 0
  }
}

struct StepDone {
  shard @0 :UInt32;
  step @1 :Int64;                 # the shard now serves version step+1 (step -1: initialized)
  loss @2 :Float32;               # mean VW loss of the step, from the shard owning the loss chunk
  hasLoss @3 :Bool;
  durableStep @4 :Int64 = -1;     # newest checkpoint this shard has written durably (-1: none)
  checkpointError @5 :Text;       # why the newest checkpoint attempt failed; empty when it did not.
                                  # The shard keeps serving from memory; durableStep does not advance.
  lr @6 :Float64;                 # the learning rate the step applied
  bytesIn @7 :UInt64;             # gradient bytes pushed to this shard process so far
  bytesOut @8 :UInt64;            # parameter bytes pulled from it so far
  checkpointBlockingMs @9 :Float64;  # the durableStep checkpoint: how long the shard's loop stopped to
                                     # snapshot it (0: unknown, e.g. restored rather than written)
  checkpointWriteMs @10 :Float64;    # ... and how long the background RocksDB write took
}
# Checkpoints are written in the background, so a step's StepDone carries the
# durable step known when the step completed. When a checkpoint lands (or fails)
# the shard sends one more StepDone for the step it has completed last, with
# hasLoss false and the new durableStep / checkpointError.

struct ChunkRef {
  chunk @0 :UInt32;
  frame @1 :UInt32;               # index of the byte frame after the envelope (0 = first)
}

struct Push {
  epoch @0 :UInt64;
  step @1 :Int64;                 # -1: initial values (version 0)
  blockLo @2 :UInt32;
  blockSize @3 :UInt32;
  chunks @4 :List(ChunkRef);
  shm @5 :ShmRegionRef;           # optional: a region of the worker's (common/shm.h) holding the bytes of
  shmChunks @6 :List(ShmChunk);   # these chunks; the shard reads them before it answers, and refuses the
                                  # push with FailedPrecondition when it cannot map the region
  sparse @7 :List(SparseRowsRef); # the block's rows of each sparse table this shard holds rows of
                                  # (every table, also with no row: the block is counted)
}

# Rows of a sparse table in a message: `rows` ids, strictly ascending, as
# little-endian uint64 in frame idsFrame, and their values (rows x the table's
# dim, float32) in frame valuesFrame. `table` indexes the layout's sparse tensors.
struct SparseRowsRef {
  table @0 :UInt32;
  rows @1 :UInt32;
  idsFrame @2 :UInt32;
  valuesFrame @3 :UInt32;
  # Or, with inShm, the bytes in a shared-memory region of the worker's (common/shm.h): a push's
  # own region (Push.shm), or the one its pull named (Pull.shm, from Pull.shmRowsAt on). The
  # ids at idsOffset, the values (valuesBytes) at valuesOffset; the frames are not named.
  inShm @4 :Bool;
  idsOffset @5 :UInt64;
  valuesOffset @6 :UInt64;
  valuesBytes @7 :UInt64;
}

# A pull's request for a sparse table's rows at the pull's version: those
# changed by the steps after version `since` (a worker holding the table at
# `since`; 0: every row a step changed; -1: every stored row, the rows
# --init_from seeded at version 0 too).
struct SparseRead {
  table @0 :UInt32;
  since @1 :Int64;
  # A worker looking the table up by its batches' rows (docs/design.md, "Sparse
  # tables"): instead of the rows changed since `since`, exactly these `rows`
  # ids, strictly ascending, of this shard, as little-endian uint64 in frame
  # idsFrame; the reply holds every one of them (untouched rows at their
  # initial values). Without lookup, `rows` ids (0 or more) name the rows the
  # worker's next plan touches of a table it holds, for the shard to bring
  # into memory ahead of the step (warm rows); the reply is the rows changed
  # since `since` all the same.
  lookup @2 :Bool;
  rows @3 :UInt32;
  idsFrame @4 :UInt32;
  # A page of a read by version: the rows from row fromRow on, at most maxRows
  # of them (0: all); a reply of fewer is the last page. Not with `lookup`.
  fromRow @5 :UInt64;
  maxRows @6 :UInt32;
}

struct PushReply {
  step @0 :Int64;
  accepted @1 :UInt32;
  duplicates @2 :UInt32;
}

struct Pull {
  version @0 :Int64;
  chunks @1 :List(UInt32);        # empty: every chunk the shard owns
  dtype @2 :UInt8 = 0;            # eps::WireDType of the parameter chunks in the reply: fp32, or the
                                  # job's weightWireDtype (buffers always travel as fp32)
  shm @3 :ShmRegionRef;           # optional: a region of the worker's (common/shm.h) for the reply's bytes,
  shmOffsets @4 :List(UInt64);    # where each of `chunks` goes in it (same length as chunks)
  sparse @5 :List(SparseRead);    # sparse tables' rows; a pull naming these names no chunk (and a
                                  # region only for the rows: shmRowsAt)
  optimizerDigest @6 :Bool;       # also the digest of the shard's optimizer state (the current version only)
  timeline @7 :UInt64;            # the timeline of the plan it serves (StepPlan.timeline); 0: a reader
                                  # outside any plan (the coordinator's final pull), never refused for it
  shmRowsAt @8 :UInt64;           # a pull of sparse rows naming a region (shm, no offsets): the rows of
                                  # the reply may go there from this offset on (0 with no sparse read)
}

struct ShmRegionRef {
  pid @0 :UInt32;
  fd @1 :Int32;
  token @2 :UInt64;
  size @3 :UInt64;
}

struct ShmChunk {
  chunk @0 :UInt32;
  offset @1 :UInt64;
  size @2 :UInt64;
}

struct PullReply {
  version @0 :Int64;
  chunks @1 :List(ChunkRef);      # bytes in frames
  shmChunks @2 :List(ShmChunk);   # bytes already in the region the pull named
  sparse @3 :List(SparseRowsRef); # the rows the pull's SparseReads asked for, at `version`
  optimizerDigest @4 :Data;       # 32 bytes when the pull asked: the shard's sum (common/digest.h SetDigest)
}

struct EvalResult {
  worker @0 :UInt32;
  version @1 :Int64;
  lo @2 :Int64;
  hi @3 :Int64;
  correct @4 :Int64;
  lossSum @5 :Float64;
}

struct Shutdown {
  reason @0 :Text;
}

struct Heartbeat {
  worker @0 :UInt32;              # sent off the training thread; never answered unless refused
}

struct Leave {
  worker @0 :UInt32;              # a graceful leave (SIGTERM, preemption): answered with a stop plan
  reason @1 :Text;
  hostFault @2 :Bool;             # it cannot run on its host (its set-up failed): the job is not at
                                  # fault, and the coordinator backs the host off after repeats
}

struct Rollback {
  step @0 :Int64;                 # coordinator -> shard: load your checkpoint of this step and serve
                                  # version `step`; checkpoints newer than it are deleted (the job
                                  # abandons that future). Waiting pulls for versions the shard no
                                  # longer holds, and of an earlier timeline, get an error; pushes
                                  # for other steps are refused.
  timeline @1 :UInt64;            # the timeline this rollback starts (StepPlan.timeline)
}

struct RollbackDone {
  shard @0 :UInt32;               # shard -> coordinator, the answer to Rollback
  step @1 :Int64;                 # the step asked for
  version @2 :Int64;              # the version the shard serves now (= step when code is 0)
  durableStep @3 :Int64;          # newest checkpoint the shard holds now
  code @4 :UInt16;                # 0: rolled back. Otherwise an eps::StatusCode and nothing changed:
                                  # InvalidArgument = the shard holds no checkpoint of that step,
                                  # FailedPrecondition = it has no store, DataLoss = the checkpoint
                                  # is corrupt, Unavailable = a checkpoint write did not finish in time.
  message @5 :Text;
}

struct Retain {
  fromStep @0 :Int64;             # coordinator -> shard: every shard holds a checkpoint of this step
                                  # or newer durably, so the job may roll back to it. Keep every
                                  # checkpoint from this step on (besides the newest N); older ones
                                  # may go. -1: not known yet, keep them all. Never answered.
}

# The inter-job scheduler (elastic/pool_scheduler.h). A pool worker asks the
# scheduler which job to train, and asks again every poll while it trains;
# when the answer names another job (or none), it leaves its job gracefully and
# attaches to the new one.
struct PoolRequest {
  host @0 :Text;                  # pool worker -> scheduler: "hostname:pid", as it registers with coordinators
  deviceKind @1 :Text = "cpu";
  job @2 :Text;                   # the job it trains now (empty: none)
  ended @3 :Text;                 # a job whose coordinator told this worker it is over (empty: none):
                                  # the scheduler takes it as ended at once, not a few silent rounds later
}

struct PoolAssign {
  job @0 :Text;                   # scheduler -> pool worker: the job to train (empty: stay idle, ask again)
  coordinator @1 :Text;           # that job's coordinator
  token @2 :Text;                 # and its token
  serverKey @3 :Text;             # and its servers' CURVE public key (Z85); empty: no CURVE
}

struct JobInfo {
  # scheduler -> coordinator: what the job needs and how fast its workers are
}

struct WorkerSpeed {
  host @0 :Text;                  # as the worker registered
  deviceKind @1 :Text;
  secondsPerVw @2 :Float64;       # the coordinator's estimate; 0 while not measured
}

struct JobInfoReply {
  jobId @0 :Text;
  virtualWorkers @1 :UInt32;
  batchPerVw @2 :UInt32;
  minWorkers @3 :UInt32;
  maxVwsPerWorker @4 :UInt32;     # 0: no cap
  steps @5 :Int64;                # the job's length
  step @6 :Int64;                 # the step it is at
  workers @7 :List(WorkerSpeed);  # its live workers
}

struct JobStatusRequest {
  # anyone with the job's token -> coordinator: how the job is doing. Read-only.
  recentEvents @0 :UInt32 = 20;   # how many of the newest events to include
}

struct WorkerStatus {
  worker @0 :UInt32;
  host @1 :Text;
  pid @2 :UInt32;
  deviceKind @3 :Text;
  state @4 :Text;                 # "registered", "ready", "left" or "dead"
  vwLo @5 :UInt32;                # VWs [vwLo, vwHi) in the current assignment
  vwHi @6 :UInt32;
  secondsPerVw @7 :Float64;       # the coordinator's estimate; 0 while not measured
  sinceHeartbeatS @8 :Float64;
  stepsContributed @9 :Int64;     # steps in which its ranges were confirmed
  metricsAddress @10 :Text;
  cpuKernels @11 :Text;           # as it reported them when it registered
}

struct ShardStatus {
  shard @0 :UInt32;
  address @1 :Text;
  registered @2 :Bool;
  version @3 :Int64;              # the version it serves
  durableStep @4 :Int64;          # newest durable checkpoint (-1: none)
  sinceCheckpointS @5 :Float64;   # since the durable step last advanced (-1: never)
  bytesIn @6 :UInt64;
  bytesOut @7 :UInt64;
  metricsAddress @8 :Text;
  role @9 :Text;                  # "member" (in the shard map), "spare" (registered, holding
                                  # nothing: the next reshard takes it in) or "leaving" (removed
                                  # by an operator: it hands its state over, then exits)
}

struct JobStatusReply {
  jobId @0 :Text;
  model @1 :Text;
  phase @2 :Text;
  paused @3 :Bool;
  step @4 :Int64;                 # steps done
  steps @5 :Int64;                # the job's length (0: not known yet)
  epoch @6 :Float64;              # passes over the training data
  hasLoss @7 :Bool;
  loss @8 :Float32;
  lr @9 :Float64;
  samplesPerS @10 :Float64;
  etaS @11 :Float64;              # -1: unknown
  elapsedS @12 :Float64;
  virtualWorkers @13 :UInt32;
  batchPerVw @14 :UInt32;
  assignmentEpoch @15 :UInt64;
  evaluated @16 :Bool;
  testAccuracy @17 :Float64;
  workers @18 :List(WorkerStatus);
  shards @19 :List(ShardStatus);
  events @20 :List(Text);         # the newest events, oldest first, each a line of events.jsonl
  rejectedMessages @21 :UInt64;   # messages the coordinator rejected (bad, wrong token, unserved)
  holdFrom @22 :Int64 = -1;       # an operator's hold (JobControl): no step >= this starts
                                  # (-1: none); phase is "held" while it keeps the job waiting
  cpuKernels @23 :Text;           # the CPU kernels of its CPU workers (the set, or native's first)
  mapGeneration @24 :UInt64;      # the shard map's generation (0: the job's first map)
  resharding @25 :Bool;           # a move of shard state is in progress
}

struct JobControl {
  # anyone with the job's token -> coordinator: hold the job (no step >= fromStep
  # starts; every process and all state stay; 0: from the next step boundary),
  # or release it (hold false). Answered with the JobStatusReply after the change.
  hold @0 :Bool;
  fromStep @1 :Int64;
  # >= 0: neither hold nor release, but remove shard `removeShard` from the job:
  # at the next step boundary its state moves to the other shards, then it exits.
  removeShard @2 :Int32 = -1;
}

# worker -> coordinator: bytes [offset, offset + length) of a file the job's
# workers need (the TorchScript model, the --init_from file), named by its
# SHA-256 (spec.modelSha256 or spec.initSha256). length is at most the
# registration reply's fetchChunkBytes and the range lies within the file
# (the last chunk may be shorter); anything else is answered with an
# ErrorReply, and the coordinator serves on.
struct FetchModel {
  sha256 @0 :Text;                # hex, lower case
  offset @1 :UInt64;
  length @2 :UInt64;
}

# coordinator -> worker: the bytes asked for, in the byte frame `frame` after
# the envelope (never inside it).
struct FetchModelReply {
  sha256 @0 :Text;
  offset @1 :UInt64;
  frame @2 :UInt32;               # index of the byte frame after the envelope (0 = first)
  fileSize @3 :UInt64;            # the whole file's size
}

# Moving chunks between shards (docs/design.md, "Elastic shards").
# Coordinator -> every shard of the current map and of the new one, at a step
# boundary where every shard serves `step` and no plan runs: stage your part of
# `map` (the chunks it gives you that the current map gives another, asked of
# their holders with MoveRequest), hold `step` durably, and answer ReshardReady.
# A ShardConfig naming the new map commits the move; one naming the current map,
# or a Rollback, abandons it.
struct Reshard {
  map @0 :ShardMap;               # generation: the current one's + 1
  step @1 :Int64;
  addresses @2 :List(Text);       # index = shard id: where each shard of both maps serves
}

struct ReshardReady {
  shard @0 :UInt32;               # shard -> coordinator
  generation @1 :UInt64;          # the map of the Reshard it answers
  code @2 :UInt16;                # 0: staged, and `step` held durably (with a store);
                                  # otherwise an eps::StatusCode and the move cannot go on
  message @3 :Text;
  bytesIn @4 :UInt64;             # the bytes of the chunks the move brought it
  committed @5 :Bool;             # the answer to the ShardConfig that committed the move: the
                                  # shard serves under the new map now (code 0), or could not
}

struct MoveRequest {
  generation @0 :UInt64;          # shard -> shard: these chunks of yours at version `step`,
  step @1 :Int64;                 # for the move to map `generation`
  chunks @2 :List(UInt32);
  partitions @3 :List(UInt16);    # and the stored rows of these row partitions of every sparse
                                  # table, with their versions and optimizer slots
}

struct MoveReply {
  generation @0 :UInt64;
  step @1 :Int64;
  blobs @2 :List(MoveBlob);       # each chunk's value and optimizer slots, named as in a checkpoint
}

struct MoveBlob {
  name @0 :Text;
  frame @1 :UInt32;               # index of the byte frame after the envelope
  crc32 @2 :UInt32;               # zlib's CRC-32 of the frame's bytes
}
