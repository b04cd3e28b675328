// CoordinatorContact: the agent's contact with the coordinator during a
// round, one of the three machines of the round (round.h composes it):
// the directive stream (opened, re-opened with backoff, released), the
// Report cadence, the UDP liveness datagrams and the coordinator's acks of
// them, and the silence limit after which the coordinator is lost. What the
// Reports say and what a lost coordinator means are the round's; this
// machine decides when. Pure: events in, actions out (round_io.h), time from
// an injected Clock. Design: docs/protocol.md ("Liveness", "Released
// streams").
//
//   BeginRound --OpenWatch--> STREAM: Report every interval (the first after
//      |   ^                  first_report_delay_ms); a datagram every interval
//      |   |  answer says udp_heard: Report every report_interval_ms; acks
//      |   |  flow (every timeout/4): every kAckedReportInterval (none while
//      |   |  released); acks silent for kAckSilenceFraction x timeout: every
//      |   |  interval again, at once
//      |   +-- stream broke: OpenWatch after a backoff (reopen_min..max) --+
//      |   +-- refused (no acks): OpenWatch refusing releases; acks for    |
//      |   |   kReleaseRetryAfter: OpenWatch accepting one again           |
//      |   +-- acks stop while RELEASED: OpenWatch refusing releases --+   |
//      | Release while acked                                           |   |
//      v                                                               |   |
//   RELEASED: no stream, no periodic Report, directives by datagram ---+   |
//   any state: nothing answered for SilenceLimit() -> Tick says "lost" <---+
//
// Where the Assignment says stream_loss_probes, its alive datagrams are
// ALIVE_ACKED while an ack of this node's came within the ack silence (any
// round), and the first one goes at once when acks begin to flow: the
// coordinator then asks this node over UDP, instead of waiting
// kStreamLossGrace, when its stream closes (the PROBEs themselves are
// answered by rendezvous::LivenessSender's thread; docs/protocol.md,
// "Stream loss").
//
// Threading: not thread-safe; the round drives it from one thread.
#ifndef TRAINLET_AGENT_COORDINATOR_CONTACT_H_
#define TRAINLET_AGENT_COORDINATOR_CONTACT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/round_io.h"
#include "common/clock.h"
#include "rendezvous/liveness_datagram.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

// The longest Report interval the agent takes from an Assignment
// (report_interval_ms, which grows with the round: 20 s at 10,000 nodes);
// a larger value is clamped, so a bad answer cannot silence the agent.
inline constexpr absl::Duration kMaxHeardReportInterval = absl::Minutes(5);
// While the coordinator acknowledges this node's liveness datagrams
// (rendezvous::AckInterval: every timeout/4), the acks prove both that it
// lives and that it hears the node, so a running node with nothing new to
// say reports only this often (state changes still go at once). Acks that
// stop for kAckSilenceFraction of the timeout put the node back on the
// Report interval of the Assignment.
inline constexpr absl::Duration kAckedReportInterval = absl::Minutes(5);
inline constexpr double kAckSilenceFraction = 0.6;
// A node that refused a release (or ended one: its acks stopped) accepts one
// again once acks have come this long since, with a new stream.
inline constexpr absl::Duration kReleaseRetryAfter = absl::Minutes(2);

struct ContactOptions {
  v1::Member me;
  std::string job_id;
  // RoundOptions::udp_liveness, quiet_when_acked (round.h).
  bool udp_liveness = true;
  bool quiet_when_acked = true;
  // Re-opening a broken Watch stream: backoff from min to max.
  absl::Duration reopen_min_backoff = absl::Milliseconds(20);
  absl::Duration reopen_max_backoff = absl::Seconds(1);
};

class CoordinatorContact {
 public:
  using Actions = std::vector<RoundAction>;

  CoordinatorContact(ContactOptions options, Clock* clock);

  // ---- The round.

  // The round's assignment came: its cadence, its liveness (when offered
  // and sound) and its stream: OpenWatch, unless it came down the open
  // stream (`stream_open`, a re-join by datagram), which then serves it.
  void BeginRound(const v1::Assignment& assignment, bool stream_open, Actions* out);
  // The round's outcome is decided: no more Reports, datagrams or re-opens.
  void EndRound();
  // Time passed while the round's outcome is pending (`running`: the round
  // is RUNNING). Sends what is due, the Report built by `heartbeat` (what
  // the node says when it has no terminal report to repeat). Returns why
  // the coordinator is lost once nothing answered for SilenceLimit().
  std::optional<std::string> Tick(absl::Time now, bool running,
                                  absl::FunctionRef<v1::ReportRequest()> heartbeat, Actions* out);
  // When Tick has something to do (outcome pending); InfiniteFuture: nothing.
  absl::Time NextDeadline(bool running) const;

  // ---- What the Reports repeat.

  // The node's terminal report (SUCCEEDED, or the FAILED one): every
  // heartbeat repeats it, so that a lost one is sent again, and the acks
  // no longer quieten the Reports.
  void Repeat(v1::ReportRequest report) { repeated_ = std::move(report); }
  void ForgetRepeated() { repeated_.reset(); }
  // A RUNNING Report went now out of turn (ReportDue: the slow-node
  // signals): it stands for the heartbeat Report, the next one waits a
  // whole interval, so a round's Reports stay within the coordinator's cap.
  void HeartbeatSent();
  bool repeating() const { return repeated_.has_value(); }

  // ---- Answers.

  // Something the coordinator answered for this node arrived.
  void NoteContact() { last_contact_ = clock_->Now(); }
  // A Report succeeded (ReportAnswered with an ok status).
  void OnReportOk(const ReportAnswered& answer);
  // A Report of this round failed, and it says nothing final: the next one
  // at most an interval from now.
  void OnReportFailed(absl::string_view message);

  // ---- The directive stream.

  uint64_t watch_id() const { return watch_id_; }
  bool watch_open() const { return watch_open_; }
  bool stream_released() const { return stream_released_; }
  // A stream this node is told by: open, or released (by datagram).
  bool has_stream() const { return watch_open_ || stream_released_; }
  v1::WatchRequest NewWatchRequest(uint64_t round) const;
  // A stream ended. True when the round must judge it: the current stream's
  // end, not that of an older one or of the release.
  bool OnStreamEnded(const StreamEnded& e);
  // A transient break: re-opened after the backoff.
  void ReopenLater(const absl::Status& status);
  // CloseWatch when a stream is open; `always`: even when none is.
  void CloseWatch(Actions* out, bool always = false);
  // A Release directive of this round: taken while acks flow, else refused.
  void OnRelease();

  // ---- UDP liveness.

  bool has_udp() const { return udp_port_ != 0; }
  absl::Duration heartbeat_interval() const { return heartbeat_interval_; }
  // A datagram of `kind` for `round` with the next seq, under this round's
  // key. An alive one says ALIVE_ACKED while AcksReachThisNode().
  SendLiveness Datagram(uint64_t round,
                        rendezvous::LivenessKind kind = rendezvous::LivenessKind::kAlive);
  // The coordinator probes on stream loss (Assignment.stream_loss_probes)
  // and one of its acks of this node came within the ack silence: its
  // datagrams reach this node.
  bool AcksReachThisNode() const;
  // A coordinator's 48-byte datagram (an ack or a REJOIN), parsed (not yet
  // checked as this node's).
  std::optional<rendezvous::LivenessDatagram> ParseDatagram(const DatagramReceived& e);
  // An ack of one of this node's recent datagrams of `round`, under its key
  // (and newer than the last one taken, which it then becomes).
  bool TakeOwnAck(const rendezvous::LivenessDatagram& ack, uint64_t round);
  // An ack of this round's datagrams (outcome pending): the acks flow.
  void OnAck(const rendezvous::LivenessDatagram& ack);
  // A REJOIN datagram for this node, above round `current`.
  bool IsOwnNewerRejoin(const rendezvous::LivenessDatagram& rejoin, uint64_t current);
  // A DIRECTIVE datagram's directive when it is this node's and from the
  // coordinator with `coordinator_incarnation`.
  std::optional<v1::Directive> ParseDirectiveDatagram(const DirectiveDatagramReceived& e,
                                                      uint64_t coordinator_incarnation);
  // This round's liveness key as Assignment.liveness_key carries it.
  std::string liveness_key_bytes() const;

  // ---- Cadence (for tests and logs).

  // The Report interval now: the heartbeat interval, longer while the
  // coordinator hears this node's datagrams, longer still while it acks
  // them with nothing to repeat; infinite while released.
  absl::Duration ReportInterval() const;
  // How long nothing the coordinator answered (join, directive, Report
  // answer, ack) may be missing before it is lost: 1.05 heartbeat timeouts
  // plus, while no acks come, the part of the Report interval above
  // timeout/10. A broken stream is no loss: it is re-opened while the
  // Reports go on (the coordinator probes this node meanwhile, or waits
  // kStreamLossGrace for it).
  absl::Duration SilenceLimit() const;
  bool acks_flowing() const { return acks_flowing_; }

 private:
  absl::Duration AckSilence() const;
  void ReportSoon();
  // The release is over (acks stopped, or never came): the stream again,
  // refusing releases (for kReleaseRetryAfter).
  void Unrelease(absl::string_view why);
  // Whether to open a stream that accepts a release again.
  bool ReleaseRetryDue(absl::Time now, bool running) const;

  const ContactOptions options_;
  Clock* const clock_;

  // The round of the last assignment, its Report interval for heard
  // members (0: none given) and when it came.
  uint64_t round_ = 0;
  int64_t heard_report_interval_ms_ = 0;
  absl::Time round_started_ = absl::InfinitePast();

  // The directive stream.
  uint64_t watch_id_ = 0;
  bool watch_open_ = false;
  // The coordinator released the stream (a Release, taken while acked):
  // directives come by datagram; no stream to re-open, no periodic Report.
  bool stream_released_ = false;
  // A release was refused or ended: the stream stays (WatchRequest.
  // accepts_release off) until kReleaseRetryAfter after that, if acks flow.
  bool release_refused_ = false;
  absl::Time release_refused_at_ = absl::InfinitePast();
  absl::Time reopen_at_ = absl::InfiniteFuture();
  absl::Duration reopen_backoff_;

  // Reports.
  absl::Time last_contact_;
  absl::Time next_heartbeat_ = absl::InfiniteFuture();
  absl::Duration heartbeat_interval_ = absl::ZeroDuration();
  // The coordinator's heartbeat timeout (Assignment.heartbeat_timeout_ms, or
  // heartbeat_interval_ x 10 from an older coordinator).
  absl::Duration heartbeat_timeout_ = absl::ZeroDuration();
  std::string last_report_error_;
  std::optional<v1::ReportRequest> repeated_;

  // UDP liveness (from the Assignment; udp_port_ 0: none).
  int udp_port_ = 0;
  uint32_t liveness_slot_ = 0;
  rendezvous::LivenessKey liveness_key_{};
  absl::Time next_datagram_ = absl::InfiniteFuture();
  // Strictly increasing for this incarnation (the machine's lifetime).
  uint64_t liveness_seq_ = 0;
  // What the last Report answer said (nullopt: no answer yet this round).
  std::optional<bool> udp_heard_;
  // The coordinator's acks of this round's datagrams.
  bool acks_flowing_ = false;
  absl::Time last_ack_ = absl::InfinitePast();
  uint64_t last_acked_seq_ = 0;
  int64_t ignored_acks_ = 0;
  int64_t acks_stopped_ = 0;  // times the acks stopped (logged at INFO once).
  // Stream-loss probes (Assignment.stream_loss_probes this round): the last
  // own ack taken, of any round (READYs' too), and whether the last alive
  // datagram said ALIVE_ACKED.
  bool stream_loss_probes_ = false;
  absl::Time last_own_ack_ = absl::InfinitePast();
  bool said_acked_ = false;
};

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_COORDINATOR_CONTACT_H_
