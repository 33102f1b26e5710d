// JobStatusRequest / JobStatusReply on the wire: the status reply's decoding
// and encoding (the request is a single field, handled in codec.cc's switch).
#include "schema/codec_internal.h"

namespace eps {
namespace codec_internal {

Status DecodeJobStatus(wire::JobStatusReply::Reader in, Reader& r, JobStatusReply* m) {
  EPS_RETURN_IF_ERROR(r.Text(in.getJobId(), &m->job_id));
  EPS_RETURN_IF_ERROR(r.Text(in.getModel(), &m->model));
  EPS_RETURN_IF_ERROR(r.Text(in.getPhase(), &m->phase));
  m->paused = in.getPaused();
  m->step = in.getStep();
  m->steps = in.getSteps();
  m->epoch = in.getEpoch();
  m->has_loss = in.getHasLoss();
  m->loss = in.getLoss();
  m->lr = in.getLr();
  m->samples_per_s = in.getSamplesPerS();
  m->eta_s = in.getEtaS();
  m->elapsed_s = in.getElapsedS();
  m->virtual_workers = in.getVirtualWorkers();
  m->batch_per_vw = in.getBatchPerVw();
  m->assignment_epoch = Epoch(in.getAssignmentEpoch());
  m->evaluated = in.getEvaluated();
  m->test_accuracy = in.getTestAccuracy();
  m->rejected_messages = in.getRejectedMessages();
  m->hold_from = in.getHoldFrom();
  EPS_RETURN_IF_ERROR(r.Text(in.getCpuKernels(), &m->cpu_kernels));
  m->map_generation = in.getMapGeneration();
  m->resharding = in.getResharding();
  EPS_RETURN_IF_ERROR(r.ListSize(in.getWorkers(), "workers"));
  for (auto w : in.getWorkers()) {
    WorkerStatus o;
    o.worker = WorkerId(w.getWorker());
    EPS_RETURN_IF_ERROR(r.Text(w.getHost(), &o.host));
    o.pid = w.getPid();
    EPS_RETURN_IF_ERROR(r.Text(w.getDeviceKind(), &o.device_kind));
    EPS_RETURN_IF_ERROR(r.Text(w.getState(), &o.state));
    o.vw_lo = w.getVwLo();
    o.vw_hi = w.getVwHi();
    if (o.vw_lo > o.vw_hi) return ProtocolError("a worker's VW range is inverted");
    o.seconds_per_vw = w.getSecondsPerVw();
    o.since_heartbeat_s = w.getSinceHeartbeatS();
    o.steps_contributed = w.getStepsContributed();
    EPS_RETURN_IF_ERROR(r.Text(w.getMetricsAddress(), &o.metrics_address));
    EPS_RETURN_IF_ERROR(r.Text(w.getCpuKernels(), &o.cpu_kernels));
    m->workers.push_back(std::move(o));
  }
  EPS_RETURN_IF_ERROR(r.ListSize(in.getShards(), "shards"));
  for (auto s : in.getShards()) {
    ShardStatus o;
    o.shard = ShardId(s.getShard());
    EPS_RETURN_IF_ERROR(r.Text(s.getAddress(), &o.address));
    o.registered = s.getRegistered();
    o.version = Step(s.getVersion());
    o.durable_step = Step(s.getDurableStep());
    o.since_checkpoint_s = s.getSinceCheckpointS();
    o.bytes_in = s.getBytesIn();
    o.bytes_out = s.getBytesOut();
    EPS_RETURN_IF_ERROR(r.Text(s.getMetricsAddress(), &o.metrics_address));
    EPS_RETURN_IF_ERROR(r.Text(s.getRole(), &o.role));
    m->shards.push_back(std::move(o));
  }
  EPS_RETURN_IF_ERROR(r.ListSize(in.getEvents(), "events"));
  for (auto e : in.getEvents()) {
    std::string line;
    EPS_RETURN_IF_ERROR(r.Text(e, &line));
    m->events.push_back(std::move(line));
  }
  return OkStatus();
}

void SetJobStatus(wire::JobStatusReply::Builder o, const JobStatusReply& m) {
  o.setJobId(m.job_id);
  o.setModel(m.model);
  o.setPhase(m.phase);
  o.setPaused(m.paused);
  o.setStep(m.step);
  o.setSteps(m.steps);
  o.setEpoch(m.epoch);
  o.setHasLoss(m.has_loss);
  o.setLoss(m.loss);
  o.setLr(m.lr);
  o.setSamplesPerS(m.samples_per_s);
  o.setEtaS(m.eta_s);
  o.setElapsedS(m.elapsed_s);
  o.setVirtualWorkers(m.virtual_workers);
  o.setBatchPerVw(m.batch_per_vw);
  o.setAssignmentEpoch(m.assignment_epoch.value());
  o.setEvaluated(m.evaluated);
  o.setTestAccuracy(m.test_accuracy);
  o.setRejectedMessages(m.rejected_messages);
  o.setHoldFrom(m.hold_from);
  o.setCpuKernels(m.cpu_kernels);
  o.setMapGeneration(m.map_generation);
  o.setResharding(m.resharding);
  auto ws = o.initWorkers(static_cast<unsigned>(m.workers.size()));
  for (size_t i = 0; i < m.workers.size(); ++i) {
    const WorkerStatus& w = m.workers[i];
    ws[i].setWorker(w.worker.value());
    ws[i].setHost(w.host);
    ws[i].setPid(w.pid);
    ws[i].setDeviceKind(w.device_kind);
    ws[i].setState(w.state);
    ws[i].setVwLo(w.vw_lo);
    ws[i].setVwHi(w.vw_hi);
    ws[i].setSecondsPerVw(w.seconds_per_vw);
    ws[i].setSinceHeartbeatS(w.since_heartbeat_s);
    ws[i].setStepsContributed(w.steps_contributed);
    ws[i].setMetricsAddress(w.metrics_address);
    ws[i].setCpuKernels(w.cpu_kernels);
  }
  auto ss = o.initShards(static_cast<unsigned>(m.shards.size()));
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const ShardStatus& s = m.shards[i];
    ss[i].setShard(s.shard.value());
    ss[i].setAddress(s.address);
    ss[i].setRegistered(s.registered);
    ss[i].setVersion(s.version.value());
    ss[i].setDurableStep(s.durable_step.value());
    ss[i].setSinceCheckpointS(s.since_checkpoint_s);
    ss[i].setBytesIn(s.bytes_in);
    ss[i].setBytesOut(s.bytes_out);
    ss[i].setMetricsAddress(s.metrics_address);
    ss[i].setRole(s.role);
  }
  auto es = o.initEvents(static_cast<unsigned>(m.events.size()));
  for (size_t i = 0; i < m.events.size(); ++i) es.set(i, m.events[i]);
}
}  // namespace codec_internal
}  // namespace eps
