// Who the operator is to the API server: the user name its own requests
// carry in an AdmissionReview's request.userInfo.username. The admission
// webhook lets a write through unchanged only when it is gracekeeper's own:
// field manager "gracekeeper" and this user (admission.h). Any client can
// name that field manager; only the operator's credentials give this name.
//
// The name comes from the API server itself, with a SelfSubjectReview
// (authentication.k8s.io/v1, Kubernetes >= 1.28; the default role
// system:basic-user lets every authenticated user create one): whatever the
// credentials (the in-cluster ServiceAccount token gives
// "system:serviceaccount:NAMESPACE:NAME"; a kubeconfig's certificate, token
// or exec plugin gives its own), it is the name the API server writes into
// the reviews of the operator's requests.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>

#include "gracekeeper/kube/client.h"

namespace gracekeeper::webhook {

// The user name of a SelfSubjectReview as the API server answers it
// (status.userInfo.username); an error naming what is missing.
std::expected<std::string, std::string> self_subject_user(const nlohmann::json& review);

// Asks the API server once.
boost::asio::awaitable<std::expected<std::string, std::string>> ask_own_user(kube::Client&);

// Asks until the API server answers: at once, then after 5 s, 10 s, 20 s ...
// (at most 5 minutes apart), until `stopping`. Sets `user` once, and logs it;
// each failure is a warning. Until then `user` stays "" and no write counts
// as the operator's own. `client`, `user` and `stopping` must outlive it.
boost::asio::awaitable<void> learn_own_user(kube::Client& client, std::string& user,
                                            const bool& stopping);

}  // namespace gracekeeper::webhook
