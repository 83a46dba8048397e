// The mutating admission webhook's decision, without I/O: an AdmissionReview
// v1 in, the AdmissionReview to answer (or a 4xx) out. On CREATE and UPDATE
// of an opted-in apps/v1 Deployment whose namespace has a governing policy
// in Enforce mode, the answer carries a JSON patch that writes the current
// plan: the same decide_deployment the reconciler runs, on the same
// projection of the object, and the same owned fields (takeover.h), so the
// stored object is what the reconciler would write and it has nothing left
// to do. Everything comes from the informers' stores, which every replica
// keeps: no API call per request.
//
// The reconciler's own writes (field manager "gracekeeper", sent by the
// operator's own user: identity.h) are allowed unchanged: on a replica that
// is not the leader the figure comes from the policy's status, which can lag
// the leader's measurement by one status write, and planning the write again
// with it would undo a re-tune. Anyone else's write under that field manager
// is planned like any other.
//
// The patch sets the owned fields (takeover.h) and removes gracekeeper's own
// hook from a container the plan leaves without one (the wait fell to 0),
// with the lifecycle when nothing else is left in it, as the reconciler's
// server-side apply does when it no longer states the hook.
//
// It never refuses an object: anything else, and any internal error, is
// allowed unchanged (an error adds a warning). Only a request that is not an
// AdmissionReview v1 with a uid gets a 400.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "gracekeeper/budget/engine.h"
#include "gracekeeper/deployment/cache.h"
#include "gracekeeper/deployment/propagation_book.h"
#include "gracekeeper/deployment/services.h"
#include "gracekeeper/deployment/status.h"
#include "gracekeeper/kube/store.h"

namespace gracekeeper::controller {

// The largest AdmissionReview read: 7 MiB, controller-runtime's limit. An
// UPDATE's review carries the object and the old object, each up to 1.5 MiB
// in etcd and larger as JSON, so the API server's 3 MiB request limit is
// too small here.
inline constexpr std::size_t kMaxAdmissionBytes = std::size_t{7} * 1024 * 1024;

struct AdmissionInputs {
  kube::Store<CachedPolicy> policies;
  kube::Store<CachedService> services;
  // This replica's own measurements (the leader's); a policy missing there
  // uses the figure the leader wrote into its status.
  const PropagationBook* propagation = nullptr;
  budget::Capabilities capabilities{};
  TimePoint now{};
  // Why the stores cannot be trusted yet ("caches not synced"); "" when they
  // can. An opted-in Deployment is then allowed unchanged, with a warning.
  std::string not_ready{};
  // The user the operator's own requests are sent as (identity.h); "" while
  // unknown, when no request counts as the reconciler's own write.
  std::string own_user{};
};

struct AdmissionAnswer {
  enum class Outcome {
    Patched,     // allowed with the plan as a patch
    Unchanged,   // governed and opted in, nothing to change (compliant, DryRun, no figure yet)
    Ignored,     // not an opted-in Deployment being created or updated, no governing
                 // policy, or the reconciler's own write (field manager "gracekeeper"
                 // and the operator's own user)
    Error,       // allowed unchanged after an internal error, with a warning
    BadRequest,  // not an AdmissionReview v1 with a uid: 400
  };
  Outcome outcome = Outcome::Ignored;
  int status = 200;
  std::string body;       // the AdmissionReview v1 (JSON), or a one-line text for a 400
  std::string error;      // BadRequest or Error: what was wrong, for the log
  bool opted_in = false;  // the object carries gracekeeper.dev/enabled: "true"
};

std::string_view to_string(AdmissionAnswer::Outcome);

AdmissionAnswer admit(std::string_view body, const AdmissionInputs&);

// The figure a policy plans with when this replica has not measured it: the
// one in its status, if the status is of the policy's current generation.
std::optional<PropagationState> status_propagation(const CachedPolicy&);

// A policy's figure as the reconciler would plan with it: this replica's own
// measurement (in `book`, when given), else the one the leader wrote into the
// policy's status (status_propagation).
std::optional<PropagationState> policy_propagation(const PropagationBook* book,
                                                   const CachedPolicy&);

}  // namespace gracekeeper::controller
