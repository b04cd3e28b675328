// Fuzz target: the UDP liveness datagram (rendezvous/liveness_datagram.h) as
// the coordinator's liveness thread receives it, from anyone on the network.
// ParseLivenessDatagram takes exactly the documented size and shape and a
// parsed datagram re-encodes to the same bytes when its MAC is valid; then
// the whole input, cut into 48-byte datagrams, goes through
// Coordinator::NoteLivenessBatch of a running two-member job: nothing
// crashes, every datagram is counted once, and none without the members'
// keys is accepted or acked. The same bytes as an ack parse as one kind at
// most, and as a directive datagram only when it is one. Stream loss: the
// bytes as a PROBE (what an agent's answering thread takes, and what an
// ICMP error quotes back to the coordinator) parse only as that kind, and
// its answer re-encodes as a PROBE_ANSWER of the same fields; with a probe
// out for member b, neither the input's answers nor its quoted probes
// keep b or make it lost (they lack its key and the nonce): b is lost when
// the window ends, exactly.
#include <cstring>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "fuzz/fuzz_util.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/liveness_datagram.h"
#include "rendezvous/protocol_version.h"
#include "rendezvous/testing/recording_datagram_sender.h"

namespace rdv = trainlet::rendezvous;

namespace {
class NullSink : public rdv::DirectiveSink {
 public:
  void Send(const trainlet::v1::Directive&, bool) override {}
  void Close(const absl::Status&) override {}
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<rdv::LivenessDatagram> d = rdv::ParseLivenessDatagram(data, size);
  if (d.has_value()) {
    FUZZ_CHECK(size == rdv::kLivenessDatagramBytes, "parsed a datagram of another size");
    FUZZ_CHECK(std::memcmp(data, "TLVD", 4) == 0, "parsed without the magic");
    rdv::LivenessKey zero{};
    if (d->MacValid(zero)) {
      const rdv::LivenessBytes again =
          rdv::EncodeLivenessDatagram(d->slot, d->incarnation, d->round, d->seq, zero);
      FUZZ_CHECK(std::memcmp(again.data(), data, size) == 0, "re-encoding differs");
    }
  }
  // The same bytes as an ack (what an agent's liveness socket receives):
  // never both kinds at once.
  std::optional<rdv::LivenessDatagram> ack =
      rdv::ParseLivenessDatagram(data, size, rdv::LivenessKind::kAck);
  FUZZ_CHECK(!(ack.has_value() && d.has_value()), "parsed as both kinds");
  // What the coordinator's liveness thread takes: alive or ready, never an ack.
  std::optional<rdv::LivenessDatagram> agent = rdv::ParseAgentDatagram(data, size);
  FUZZ_CHECK(!(agent.has_value() && ack.has_value()), "an ack taken from an agent");
  const bool agent_alive = agent.has_value() && agent->kind == rdv::LivenessKind::kAlive;
  FUZZ_CHECK(agent_alive == d.has_value(), "an alive datagram parsed differently");
  if (agent.has_value()) {
    rdv::LivenessKey zero{};
    if (agent->MacValid(zero)) {
      const rdv::LivenessBytes again = rdv::EncodeLivenessDatagram(
          agent->slot, agent->incarnation, agent->round, agent->seq, zero, agent->kind);
      FUZZ_CHECK(std::memcmp(again.data(), data, size) == 0, "re-encoding differs");
    }
  }
  // What an agent's liveness socket takes: ack or rejoin, never an agent's.
  std::optional<rdv::LivenessDatagram> from_coordinator = rdv::ParseCoordinatorDatagram(data, size);
  FUZZ_CHECK(!(from_coordinator.has_value() && agent.has_value()),
             "parsed as both an agent's and the coordinator's");
  FUZZ_CHECK(ack.has_value() == (from_coordinator.has_value() &&
                                 from_coordinator->kind == rdv::LivenessKind::kAck),
             "an ack parsed differently");
  if (from_coordinator.has_value() && from_coordinator->kind == rdv::LivenessKind::kRejoin) {
    rdv::LivenessKey zero{};
    const rdv::LivenessDatagram& r = *from_coordinator;
    if (rdv::IsOwnNewerRejoin(r, r.slot, r.incarnation, r.round - 1, zero)) {
      FUZZ_CHECK(r.round > 0, "a REJOIN for a round not above 0 taken");
      const rdv::LivenessBytes again = rdv::EncodeLivenessDatagram(
          r.slot, r.incarnation, r.round, r.seq, zero, rdv::LivenessKind::kRejoin);
      FUZZ_CHECK(std::memcmp(again.data(), data, size) == 0, "re-encoding a REJOIN differs");
    }
  }
  if (ack.has_value()) {
    FUZZ_CHECK(ack->kind == rdv::LivenessKind::kAck, "an ack of another kind");
    rdv::LivenessKey zero{};
    if (ack->MacValid(zero)) {
      const rdv::LivenessBytes again = rdv::EncodeLivenessDatagram(
          ack->slot, ack->incarnation, ack->round, ack->seq, zero, rdv::LivenessKind::kAck);
      FUZZ_CHECK(std::memcmp(again.data(), data, size) == 0, "re-encoding an ack differs");
    }
  }

  // What an agent's liveness socket takes beyond 48 bytes: a directive
  // datagram, exactly its declared length, never also a 48-byte kind; with a
  // valid MAC it re-encodes to the same bytes.
  std::optional<rdv::DirectiveDatagram> directive = rdv::ParseDirectiveDatagram(data, size);
  if (directive.has_value()) {
    FUZZ_CHECK(size > rdv::kLivenessDatagramBytes && size <= rdv::kMaxDirectiveDatagramBytes,
               "a directive datagram of a size out of bounds");
    FUZZ_CHECK(directive->payload.size() == size - rdv::kLivenessDatagramBytes,
               "a payload of another length");
    FUZZ_CHECK(!from_coordinator.has_value() && !agent.has_value(), "parsed as two kinds");
    rdv::LivenessKey zero{};
    const rdv::LivenessDatagram& h = directive->header;
    if (rdv::IsOwnDirective(*directive, h.slot, h.incarnation, zero)) {
      std::optional<std::string> again =
          rdv::EncodeDirectiveDatagram(h.slot, h.incarnation, h.round, directive->payload, zero);
      FUZZ_CHECK(
          again.has_value() && again->size() == size && std::memcmp(again->data(), data, size) == 0,
          "re-encoding a directive datagram differs");
    }
  }

  // A probe (what an agent's answering thread takes): only that kind; its
  // answer carries the same fields, as the agent's datagram it is.
  std::optional<rdv::LivenessDatagram> probe = rdv::ParseProbe(data, size);
  if (probe.has_value()) {
    FUZZ_CHECK(size == rdv::kLivenessDatagramBytes && probe->kind == rdv::LivenessKind::kProbe,
               "a probe of another size or kind");
    FUZZ_CHECK(!agent.has_value() && !from_coordinator.has_value() && !ack.has_value(),
               "a probe parsed as another kind too");
    rdv::LivenessKey zero{};
    if (rdv::IsOwnProbe(*probe, probe->slot, probe->incarnation, zero)) {
      const rdv::LivenessBytes answer = rdv::EncodeProbeAnswer(*probe, zero);
      std::optional<rdv::LivenessDatagram> a =
          rdv::ParseAgentDatagram(answer.data(), answer.size());
      FUZZ_CHECK(a.has_value() && a->kind == rdv::LivenessKind::kProbeAnswer &&
                     a->slot == probe->slot && a->incarnation == probe->incarnation &&
                     a->round == probe->round && a->seq == probe->seq && a->MacValid(zero),
                 "a probe's answer differs from the probe");
    }
  }

  trainlet::SimulatedClock clock;
  rdv::CoordinatorOptions o;
  o.job_id = "job";
  o.min_nodes = o.max_nodes = 2;
  o.last_call = absl::Milliseconds(500);
  o.heartbeat_timeout = absl::Seconds(5);
  o.min_nodes_timeout = absl::Minutes(5);
  o.incarnation = 1;
  o.clock = &clock;
  rdv::Coordinator core(o);
  rdv::RecordingDatagramSender sender;
  core.EnableUdpLiveness(29400, &sender);
  trainlet::v1::Assignment assigned[2];
  trainlet::v1::JoinRequest members[2];
  for (int i = 0; i < 2; ++i) {
    trainlet::v1::JoinRequest r;
    r.mutable_member()->set_node_id(i == 0 ? "a" : "b");
    r.mutable_member()->set_incarnation(i + 1);
    r.set_job_id("job");
    r.set_protocol_version(rdv::kProtocolVersion);
    r.set_rank_hint(i);
    r.set_local_world_size(1);
    r.set_master_port(29500);
    r.set_udp_liveness(true);
    members[i] = r;
    core.Join(r, "10.0.0.1", absl::InfiniteFuture(),
              [&assigned, i](absl::StatusOr<trainlet::v1::Assignment> a) {
                if (a.ok()) assigned[i] = *a;
              });
  }
  // Both watch; b says the coordinator's acks reach it, then its stream
  // closes: a probe is out for b.
  uint64_t watch_b = 0;
  for (int i = 0; i < 2; ++i) {
    trainlet::v1::WatchRequest w;
    *w.mutable_member() = members[i].member();
    w.set_job_id("job");
    w.set_round(1);
    absl::StatusOr<uint64_t> id = core.Watch(w, std::make_shared<NullSink>());
    FUZZ_CHECK(id.ok(), "a member's watch refused");
    watch_b = *id;
  }
  {
    const rdv::LivenessBytes b = rdv::EncodeLivenessDatagram(
        assigned[1].liveness_slot(), 2, 1, 1,
        *rdv::LivenessKeyFromBytes(assigned[1].liveness_key()), rdv::LivenessKind::kAliveAcked);
    const sockaddr_storage from[1] = {};
    const rdv::LivenessOrigin origin{0, from};
    FUZZ_CHECK(core.NoteLivenessBatch({*rdv::ParseAgentDatagram(b.data(), b.size())}, nullptr,
                                      nullptr, &origin)
                       .accepted == 1,
               "b's own datagram refused");
  }
  core.WatchClosed(watch_b);
  FUZZ_CHECK(sender.sent().size() == 1, "no probe for b");
  std::vector<rdv::LivenessDatagram> batch, quoted;
  size_t cut = 0;
  for (size_t off = 0; off + rdv::kLivenessDatagramBytes <= size;
       off += rdv::kLivenessDatagramBytes) {
    ++cut;
    std::optional<rdv::LivenessDatagram> p =
        rdv::ParseAgentDatagram(data + off, rdv::kLivenessDatagramBytes);
    if (p.has_value()) batch.push_back(*p);
    std::optional<rdv::LivenessDatagram> q =
        rdv::ParseProbe(data + off, rdv::kLivenessDatagramBytes);
    if (q.has_value()) quoted.push_back(*q);
  }
  std::vector<rdv::LivenessAck> acks;
  const rdv::LivenessBatchStats s = core.NoteLivenessBatch(batch, &acks);
  FUZZ_CHECK(s.accepted + s.rejected() == static_cast<int>(batch.size()), "a datagram miscounted");
  FUZZ_CHECK(s.accepted == 0, "accepted a datagram without the member's random key");
  FUZZ_CHECK(acks.empty(), "acked a datagram it did not accept");
  FUZZ_CHECK(batch.size() <= cut, "more datagrams than pieces");
  FUZZ_CHECK(core.NoteProbesRefused(quoted) == 0, "a refusal without the nonce and key counted");
  core.Tick();
  FUZZ_CHECK(core.GetSnapshot().phase == rdv::Phase::kRunning, "b lost before its window ended");
  clock.Advance(rdv::kStreamProbeWindow);
  FUZZ_CHECK(core.CheckProbes(clock.Now()) == absl::InfiniteFuture(), "a probe still out");
  FUZZ_CHECK(core.GetSnapshot().phase == rdv::Phase::kFailed, "b kept by what the input said");
  return 0;
}
