#include "agent/coordinator_contact.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rendezvous/protocol.h"

namespace trainlet::agent {

CoordinatorContact::CoordinatorContact(ContactOptions options, Clock* clock)
    : options_(std::move(options)), clock_(clock), reopen_backoff_(options_.reopen_min_backoff) {}

// ---- The round.

void CoordinatorContact::BeginRound(const v1::Assignment& a, bool stream_open, Actions* out) {
  round_ = a.round();
  heard_report_interval_ms_ = a.report_interval_ms();
  NoteContact();
  heartbeat_interval_ = absl::Milliseconds(std::max<int64_t>(0, a.heartbeat_interval_ms()));
  heartbeat_timeout_ = a.heartbeat_timeout_ms() > 0
                           ? absl::Milliseconds(a.heartbeat_timeout_ms())
                           : heartbeat_interval_ * rendezvous::kHeartbeatsPerTimeout;
  const absl::Time now = clock_->Now();
  next_heartbeat_ = heartbeat_interval_ > absl::ZeroDuration() ? now + heartbeat_interval_
                                                               : absl::InfiniteFuture();
  // UDP liveness when the coordinator offers it (and the key is sound):
  // the first datagram at once, so that the first Report's answer can
  // already say it was heard.
  udp_heard_.reset();
  acks_flowing_ = false;
  last_ack_ = absl::InfinitePast();
  // Only acks of datagrams sent from now on (a late ack of a READY is no
  // proof of this round).
  last_acked_seq_ = liveness_seq_;
  udp_port_ = 0;
  stream_loss_probes_ = false;
  next_datagram_ = absl::InfiniteFuture();
  std::optional<rendezvous::LivenessKey> key = rendezvous::LivenessKeyFromBytes(a.liveness_key());
  if (options_.udp_liveness && a.liveness_udp_port() > 0 && a.liveness_udp_port() <= 65535 &&
      key.has_value() && heartbeat_interval_ > absl::ZeroDuration()) {
    udp_port_ = static_cast<int>(a.liveness_udp_port());
    stream_loss_probes_ = a.stream_loss_probes();
    liveness_slot_ = a.liveness_slot();
    liveness_key_ = *key;
    next_datagram_ = now;
    // A large round spreads its members' first Reports (the answer says
    // whether the datagrams are heard) instead of sending them all at once.
    if (a.first_report_delay_ms() > 0) {
      next_heartbeat_ =
          now + std::min(absl::Milliseconds(a.first_report_delay_ms()), heartbeat_timeout_ / 2);
    }
  }
  repeated_.reset();
  last_report_error_.clear();

  // The stream first, so that no directive about this round is missed (a
  // re-join by datagram kept it open: it serves this round now; a released
  // node has none, and its directives keep coming by datagram).
  round_started_ = now;
  if (!stream_open) {
    out->push_back(OpenWatch{NewWatchRequest(a.round()), ++watch_id_});
    stream_released_ = false;
  }
  watch_open_ = !stream_released_;
  reopen_at_ = absl::InfiniteFuture();
  reopen_backoff_ = options_.reopen_min_backoff;
}

void CoordinatorContact::EndRound() {
  next_heartbeat_ = next_datagram_ = reopen_at_ = absl::InfiniteFuture();
}

std::optional<std::string> CoordinatorContact::Tick(
    absl::Time now, bool running, absl::FunctionRef<v1::ReportRequest()> heartbeat, Actions* out) {
  if (acks_flowing_ && now - last_ack_ >= AckSilence()) {
    // Lost on the way, or the coordinator is gone: the Reports say which.
    acks_flowing_ = false;
    udp_heard_.reset();
    // Once at INFO; a lossy network can flap (acks stop, resume, stop).
    const std::string line =
        absl::StrCat("no liveness ack from the coordinator for ",
                     absl::FormatDuration(absl::Trunc(now - last_ack_, absl::Milliseconds(1))),
                     "; reporting every ", absl::FormatDuration(heartbeat_interval_), " again");
    if (acks_stopped_++ == 0) {
      TLOG(kInfo) << line;
    } else {
      TLOG(kDebug) << line;
    }
    next_heartbeat_ = std::min(next_heartbeat_, now);
  }
  if (now >= next_heartbeat_) {
    out->push_back(SendReport{repeated_ ? *repeated_ : heartbeat()});
    // After a stall, the next one an interval from now (not at once).
    next_heartbeat_ += ReportInterval();
    if (next_heartbeat_ <= now) next_heartbeat_ = now + ReportInterval();
  }
  if (now >= next_datagram_) {
    out->push_back(Datagram(round_));
    next_datagram_ += heartbeat_interval_;
    if (next_datagram_ <= now) next_datagram_ = now + heartbeat_interval_;
  }
  if (stream_released_ && !acks_flowing_ &&
      now - std::max(last_ack_, round_started_) >= AckSilence()) {
    Unrelease("no liveness ack from the coordinator");
  }
  if (ReleaseRetryDue(now, running)) {
    // Acks have come steadily since: a new stream that accepts a release
    // again replaces this one (a network blip, a stalled coordinator, must
    // not cost node 0 its memory for the rest of the job). The re-open
    // below opens it; the old stream's end is then an older stream's.
    release_refused_ = false;
    watch_open_ = false;
    reopen_at_ = now;
  }
  if (!watch_open_ && now >= reopen_at_) {
    out->push_back(OpenWatch{NewWatchRequest(round_), ++watch_id_});
    watch_open_ = true;
    reopen_at_ = absl::InfiniteFuture();
  }
  if (now - last_contact_ >= SilenceLimit()) {
    return absl::StrCat("no answer for ", absl::FormatDuration(absl::Trunc(now - last_contact_,
                                                                           absl::Milliseconds(1))));
  }
  return std::nullopt;
}

absl::Time CoordinatorContact::NextDeadline(bool running) const {
  absl::Time next = std::min({next_heartbeat_, next_datagram_, reopen_at_});
  if (heartbeat_interval_ > absl::ZeroDuration()) {
    next = std::min(next, last_contact_ + SilenceLimit());
  }
  if (acks_flowing_) next = std::min(next, last_ack_ + AckSilence());
  if (stream_released_ && !acks_flowing_) {
    next = std::min(next, std::max(last_ack_, round_started_) + AckSilence());
  }
  if (release_refused_ && acks_flowing_ && running) {
    next = std::min(next, release_refused_at_ + kReleaseRetryAfter);
  }
  return next;
}

// ---- Answers.

void CoordinatorContact::OnReportOk(const ReportAnswered& e) {
  NoteContact();
  if (udp_port_ != 0 && e.round == round_ && udp_heard_ != e.udp_heard) {
    udp_heard_ = e.udp_heard;
    if (e.udp_heard) {
      TLOG(kDebug) << "the coordinator hears this node's liveness datagrams; reporting every "
                   << absl::FormatDuration(ReportInterval());
      // The next Report a whole (longer) interval after this answer, not
      // the short one scheduled when it was sent: in a 10,000-node round
      // that would be 10,000 more Reports within an interval.
      next_heartbeat_ = std::max(next_heartbeat_, clock_->Now() + ReportInterval());
    } else {
      // A round's first answers may come before its first datagram does:
      // said (at INFO, once) when the datagrams have had two intervals.
      const bool settled = clock_->Now() - round_started_ >= 2 * heartbeat_interval_;
      if (!settled) udp_heard_.reset();  // asked again at the next answer
      TLOG_AT(settled ? LogLevel::kInfo : LogLevel::kDebug)
          << "the coordinator does not hear this node's UDP liveness datagrams; reporting every "
          << absl::FormatDuration(heartbeat_interval_)
          << " instead (check that UDP to the coordinator port is allowed)";
      next_heartbeat_ = std::min(next_heartbeat_, clock_->Now() + heartbeat_interval_);
    }
  }
  if (!last_report_error_.empty()) {
    TLOG(kInfo) << "reports reach the coordinator again";
    last_report_error_.clear();
  }
}

void CoordinatorContact::OnReportFailed(absl::string_view message) {
  if (last_report_error_.empty()) {
    TLOG(kWarning) << "report to the coordinator failed: " << Quoted(message)
                   << " (retrying with every heartbeat)";
  } else {
    TLOG(kDebug) << "report to the coordinator failed: " << Quoted(message);
  }
  last_report_error_ = std::string(message);
  ReportSoon();
}

void CoordinatorContact::HeartbeatSent() {
  if (next_heartbeat_ == absl::InfiniteFuture() || repeated_.has_value()) return;
  next_heartbeat_ = std::max(next_heartbeat_, clock_->Now() + ReportInterval());
}

void CoordinatorContact::ReportSoon() {
  if (heartbeat_interval_ <= absl::ZeroDuration()) return;
  next_heartbeat_ = std::min(next_heartbeat_, clock_->Now() + heartbeat_interval_);
}

// ---- The directive stream.

v1::WatchRequest CoordinatorContact::NewWatchRequest(uint64_t round) const {
  v1::WatchRequest w;
  *w.mutable_member() = options_.me;
  w.set_job_id(options_.job_id);
  w.set_round(round);
  // With UDP liveness this agent can re-join by datagram (the round's
  // JoinByDatagram), told so on the stream or by a REJOIN datagram.
  w.set_accepts_assignment(options_.udp_liveness);
  w.set_accepts_rejoin_datagram(options_.udp_liveness);
  // ... with its reason, so that this node's log says why the job restarts.
  w.set_accepts_rejoin_directive(options_.udp_liveness);
  // ... and run without the stream in a large round, where acks say all
  // that its periodic Reports would (not the MPI commands: their placement
  // check rides on them).
  w.set_accepts_release(options_.udp_liveness && options_.quiet_when_acked && !release_refused_);
  return w;
}

bool CoordinatorContact::OnStreamEnded(const StreamEnded& e) {
  if (e.watch_id != watch_id_) return false;  // an older stream, replaced or closed by us.
  watch_open_ = false;
  // The release's end: nothing to re-open.
  return !(stream_released_ && e.status.ok());
}

void CoordinatorContact::ReopenLater(const absl::Status& status) {
  // A transient break (network, proxy, keepalive): re-open it while the
  // heartbeats go on; only silence past the timeout means the coordinator
  // is lost.
  if (reopen_backoff_ == options_.reopen_min_backoff) {
    TLOG(kWarning) << "the directive stream broke (" << Quoted(status.message())
                   << "); re-opening it";
  } else {
    TLOG(kDebug) << "the directive stream broke again: " << Quoted(status.message());
  }
  reopen_at_ = clock_->Now() + reopen_backoff_;
  reopen_backoff_ = std::min(reopen_backoff_ * 2, options_.reopen_max_backoff);
}

void CoordinatorContact::CloseWatch(Actions* out, bool always) {
  if (!watch_open_ && !always) return;
  out->push_back(agent::CloseWatch{});
  watch_open_ = false;
}

void CoordinatorContact::OnRelease() {
  if (acks_flowing_ && !release_refused_ && udp_port_ != 0) {
    stream_released_ = true;
    // Not even the acked node's 5-minute Report from now on (it was
    // scheduled at the first ack): it would bring back the connection.
    if (ReportInterval() == absl::InfiniteDuration()) next_heartbeat_ = absl::InfiniteFuture();
    TLOG(kInfo) << "the coordinator released this node's directive stream: it tells this node "
                   "by datagram from now on (a large round)";
  } else {
    // Its acks do not get here: the stream must stay. It ends now; the
    // re-opened one refuses releases (for kReleaseRetryAfter).
    release_refused_ = true;
    release_refused_at_ = clock_->Now();
    TLOG(kInfo) << "refusing the coordinator's release of the directive stream: no liveness "
                   "acks arrive";
  }
}

bool CoordinatorContact::ReleaseRetryDue(absl::Time now, bool running) const {
  return release_refused_ && watch_open_ && acks_flowing_ && running && options_.udp_liveness &&
         options_.quiet_when_acked && now >= release_refused_at_ + kReleaseRetryAfter;
}

void CoordinatorContact::Unrelease(absl::string_view why) {
  TLOG(kInfo) << why << "; opening the directive stream again";
  stream_released_ = false;
  release_refused_ = true;
  release_refused_at_ = clock_->Now();
  reopen_at_ = clock_->Now();
  reopen_backoff_ = options_.reopen_min_backoff;
}

// ---- UDP liveness.

SendLiveness CoordinatorContact::Datagram(uint64_t round, rendezvous::LivenessKind kind) {
  if (kind == rendezvous::LivenessKind::kAlive || kind == rendezvous::LivenessKind::kAliveAcked) {
    said_acked_ = AcksReachThisNode();
    kind = said_acked_ ? rendezvous::LivenessKind::kAliveAcked : rendezvous::LivenessKind::kAlive;
  }
  return SendLiveness{rendezvous::EncodeLivenessDatagram(
      liveness_slot_, options_.me.incarnation(), round, ++liveness_seq_, liveness_key_, kind)};
}

std::optional<rendezvous::LivenessDatagram> CoordinatorContact::ParseDatagram(
    const DatagramReceived& e) {
  if (udp_port_ == 0) return std::nullopt;
  std::optional<rendezvous::LivenessDatagram> d =
      rendezvous::ParseCoordinatorDatagram(e.bytes.data(), e.bytes.size());
  if (!d.has_value() && ignored_acks_++ == 0) {
    TLOG(kDebug) << "ignoring a malformed datagram on the liveness socket";
  }
  return d;
}

bool CoordinatorContact::TakeOwnAck(const rendezvous::LivenessDatagram& ack, uint64_t round) {
  // Only an ack of one of this round's datagrams, newer than the last one
  // taken, of one this node has sent within the ack silence (an ack held up
  // on the way proves nothing about now), under this round's key.
  absl::Duration rest;
  rendezvous::AckExpectation expected;
  expected.slot = liveness_slot_;
  expected.incarnation = options_.me.incarnation();
  expected.round = round;
  expected.last_acked_seq = last_acked_seq_;
  expected.last_sent_seq = liveness_seq_;
  expected.window = static_cast<uint64_t>(
      std::max<int64_t>(1, absl::IDivDuration(AckSilence(), heartbeat_interval_, &rest)));
  expected.key = liveness_key_;
  if (!rendezvous::IsOwnRecentAck(ack, expected)) {
    if (ignored_acks_++ == 0) {
      TLOG(kDebug) << "ignoring a liveness ack that is not this node's";
    }
    return false;
  }
  last_acked_seq_ = ack.seq;
  last_own_ack_ = clock_->Now();
  return true;
}

bool CoordinatorContact::AcksReachThisNode() const {
  return stream_loss_probes_ && udp_port_ != 0 && clock_->Now() - last_own_ack_ < AckSilence();
}

void CoordinatorContact::OnAck(const rendezvous::LivenessDatagram& ack) {
  if (!TakeOwnAck(ack, round_)) return;
  last_ack_ = clock_->Now();
  NoteContact();
  if (!acks_flowing_) {
    acks_flowing_ = true;
    TLOG(kDebug) << "the coordinator acknowledges this node's liveness datagrams; reporting every "
                 << absl::FormatDuration(ReportInterval()) << " while it does";
    // The Report due soon (the first of the round, or the short interval)
    // waits for the longer one: the ack said all it would have asked.
    next_heartbeat_ = std::max(next_heartbeat_, last_ack_ + ReportInterval());
  }
  if (!said_acked_ && AcksReachThisNode()) {
    // Say so now, not an interval from now: until the coordinator knows,
    // a closed stream costs it kStreamLossGrace instead of a probe.
    next_datagram_ = std::min(next_datagram_, last_ack_);
  }
}

bool CoordinatorContact::IsOwnNewerRejoin(const rendezvous::LivenessDatagram& rejoin,
                                          uint64_t current) {
  if (rendezvous::IsOwnNewerRejoin(rejoin, liveness_slot_, options_.me.incarnation(), current,
                                   liveness_key_)) {
    return true;
  }
  if (ignored_acks_++ == 0) {
    TLOG(kDebug) << "ignoring a REJOIN datagram that is not this node's";
  }
  return false;
}

std::optional<v1::Directive> CoordinatorContact::ParseDirectiveDatagram(
    const DirectiveDatagramReceived& e, uint64_t coordinator_incarnation) {
  if (udp_port_ == 0) return std::nullopt;
  std::optional<rendezvous::DirectiveDatagram> dd = rendezvous::ParseDirectiveDatagram(
      reinterpret_cast<const uint8_t*>(e.bytes.data()), e.bytes.size());
  v1::Directive d;
  if (!dd.has_value() ||
      !rendezvous::IsOwnDirective(*dd, liveness_slot_, options_.me.incarnation(), liveness_key_) ||
      !d.ParseFromString(dd->payload) || d.round() != dd->header.round ||
      d.coordinator_incarnation() != coordinator_incarnation) {
    if (ignored_acks_++ == 0) {
      TLOG(kDebug) << "ignoring a DIRECTIVE datagram that is not this node's";
    }
    return std::nullopt;
  }
  return d;
}

std::string CoordinatorContact::liveness_key_bytes() const {
  return std::string(reinterpret_cast<const char*>(liveness_key_.data()), liveness_key_.size());
}

// ---- Cadence.

absl::Duration CoordinatorContact::ReportInterval() const {
  // Acked and nothing to repeat (a failure or success not yet confirmed, a
  // Report that failed): the acks say everything a RUNNING Report would.
  if (acks_flowing_ && options_.quiet_when_acked && !repeated_ && last_report_error_.empty()) {
    // Released: not even that (it would bring back a connection the
    // coordinator closed for its memory); acks that stop bring the Reports.
    if (stream_released_) return absl::InfiniteDuration();
    return std::max(heartbeat_interval_, kAckedReportInterval);
  }
  if (!udp_heard_.value_or(false)) return heartbeat_interval_;
  // The coordinator's interval for heard members (it grows with the round);
  // an older coordinator sends none.
  const absl::Duration heard =
      heard_report_interval_ms_ > 0
          ? std::min(absl::Milliseconds(heard_report_interval_ms_), kMaxHeardReportInterval)
          : heartbeat_timeout_ - heartbeat_interval_;
  return std::max(heartbeat_interval_, heard);
}

absl::Duration CoordinatorContact::AckSilence() const {
  return absl::Milliseconds(absl::ToDoubleMilliseconds(heartbeat_timeout_) * kAckSilenceFraction);
}

absl::Duration CoordinatorContact::SilenceLimit() const {
  if (heartbeat_interval_ <= absl::ZeroDuration()) return absl::InfiniteDuration();
  // An answer comes at least every Report interval; while the coordinator
  // hears this node over UDP that is more than the timeout/10 a 1.05 x
  // timeout limit assumes. Acks come every timeout/4 (at most 0.6 x the
  // timeout apart before they count as stopped): no extra.
  const absl::Duration extra =
      acks_flowing_
          ? absl::ZeroDuration()
          : std::max(absl::ZeroDuration(),
                     ReportInterval() - heartbeat_timeout_ / rendezvous::kHeartbeatsPerTimeout);
  return heartbeat_timeout_ + heartbeat_timeout_ / (2 * rendezvous::kHeartbeatsPerTimeout) + extra;
}

}  // namespace trainlet::agent
