// REST verbs over an http::Client, API errors decoded from metav1.Status,
// and which of them are worth a retry.
#include "gracekeeper/kube/client.h"

#include "gracekeeper/core/json.h"
#include "gracekeeper/http/client.h"
#include "gracekeeper/http/encoding.h"

namespace gracekeeper::kube {

namespace asio = boost::asio;
using gracekeeper::http::add_query;
using nlohmann::json;
using Verb = gracekeeper::http::Verb;

// ---------------------------------------------------------------- errors

std::string_view to_string(ApiError::Reason r) {
  using R = ApiError::Reason;
  switch (r) {
    case R::NotFound:
      return "NotFound";
    case R::AlreadyExists:
      return "AlreadyExists";
    case R::Conflict:
      return "Conflict";
    case R::Gone:
      return "Gone";
    case R::Invalid:
      return "Invalid";
    case R::TooManyRequests:
      return "TooManyRequests";
    case R::Unauthorized:
      return "Unauthorized";
    case R::Forbidden:
      return "Forbidden";
    case R::Timeout:
      return "Timeout";
    case R::ServerError:
      return "ServerError";
    case R::Transport:
      return "Transport";
    case R::BadResponse:
      return "BadResponse";
    case R::Other:
      return "Other";
  }
  return "Other";
}

std::string ApiError::format() const {
  std::string out{to_string(reason)};
  if (http_status != 0) out += " (" + std::to_string(http_status) + ")";
  out += ": " + message;
  // The server usually repeats the causes in its message; add the others.
  std::string extra;
  for (const auto& c : causes) {
    if (!c.message.empty() && message.find(c.message) != std::string::npos) continue;
    if (!extra.empty()) extra += "; ";
    extra += c.field.empty() ? c.message : c.field + ": " + c.message;
  }
  if (!extra.empty()) out += " [" + extra + "]";
  return out;
}

bool ApiError::transient() const {
  switch (reason) {
    case Reason::TooManyRequests:
    case Reason::Timeout:
    case Reason::ServerError:
    case Reason::Transport:
      return true;
    default:
      return false;
  }
}

namespace {

ApiError::Reason classify(int status, std::string_view status_reason) {
  using R = ApiError::Reason;
  if (status_reason == "NotFound") return R::NotFound;
  if (status_reason == "AlreadyExists") return R::AlreadyExists;
  if (status_reason == "Conflict") return R::Conflict;
  if (status_reason == "Gone" || status_reason == "Expired") return R::Gone;
  if (status_reason == "Invalid") return R::Invalid;
  if (status_reason == "TooManyRequests") return R::TooManyRequests;
  if (status_reason == "Unauthorized") return R::Unauthorized;
  if (status_reason == "Forbidden") return R::Forbidden;
  if (status_reason == "Timeout" || status_reason == "ServerTimeout") return R::Timeout;
  switch (status) {
    case 401:
      return R::Unauthorized;
    case 403:
      return R::Forbidden;
    case 404:
      return R::NotFound;
    case 408:
      return R::Timeout;
    case 409:
      return R::Conflict;
    case 410:
      return R::Gone;
    case 422:
      return R::Invalid;
    case 429:
      return R::TooManyRequests;
    case 504:
      return R::Timeout;
    default:
      break;
  }
  return status >= 500 && status <= 599 ? R::ServerError : R::Other;
}

using core::string_member;

}  // namespace

ApiError decode_api_error(int http_status, std::string_view body,
                          std::optional<std::chrono::seconds> retry_after) {
  ApiError e;
  e.http_status = http_status;
  e.retry_after = retry_after;
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && string_member(j, "kind") == "Status") {
    e.message = string_member(j, "message");
    e.status_reason = string_member(j, "reason");
    if (auto d = j.find("details"); d != j.end() && d->is_object()) {
      if (auto cs = d->find("causes"); cs != d->end() && cs->is_array()) {
        for (const auto& c : *cs) {
          if (c.is_object())
            e.causes.push_back({string_member(c, "field"), string_member(c, "reason"),
                                string_member(c, "message")});
        }
      }
      if (auto ra = d->find("retryAfterSeconds");
          !e.retry_after && ra != d->end() && ra->is_number_integer() && ra->get<int>() > 0) {
        e.retry_after = std::chrono::seconds{ra->get<int>()};
      }
    }
  } else {
    std::string_view start = body.substr(0, 300);
    e.message = start.empty() ? "HTTP " + std::to_string(http_status) : std::string{start};
  }
  e.reason = classify(http_status, e.status_reason);
  return e;
}

// ---------------------------------------------------------------- addressing

std::string resource_path(const Resource& r, std::string_view namespace_, std::string_view name,
                          std::string_view subresource) {
  std::string p = r.group.empty() ? "/api/" + r.version : "/apis/" + r.group + "/" + r.version;
  if (r.namespaced && !namespace_.empty()) {
    p += "/namespaces/";
    http::append_percent_encoded(p, namespace_);
  }
  p += "/" + r.resource;
  if (!name.empty()) {
    p += '/';
    http::append_percent_encoded(p, name);
  }
  if (!subresource.empty()) {
    p += '/';
    p += subresource;
  }
  return p;
}

// ---------------------------------------------------------------- client

// A Call is an http::Request. `idempotent`: sending it twice has the same
// effect as once (GET, PUT, DELETE, apply and merge patches); POST and JSON
// patches are not.

namespace {

std::optional<http::Pem> to_http(std::optional<Pem> pem) {
  if (!pem) return std::nullopt;
  return http::Pem{std::move(pem->text), std::move(pem->origin)};
}

// Where and how to connect; the bearer token is read by current_token() for
// every request, so a rotated token file is picked up.
http::Endpoint endpoint(ClusterConfig config) {
  http::Endpoint e{.url = std::move(config.server), .allow_plain_http = config.allow_plain_http};
  e.tls.certificate_authority = to_http(std::move(config.certificate_authority));
  e.tls.insecure_skip_verify = config.insecure_skip_tls_verify;
  e.tls.server_name = std::move(config.tls_server_name);
  e.tls.client_certificate = to_http(std::move(config.client_certificate));
  e.tls.client_key = to_http(std::move(config.client_key));
  if (!config.token.empty() || config.token_file) {
    ClusterConfig token_only;
    token_only.token = std::move(config.token);
    token_only.token_file = std::move(config.token_file);
    e.token = [c = std::move(token_only)]() -> std::expected<std::string, std::string> {
      auto token = current_token(c);
      if (!token) return std::unexpected(token.error().format());
      return std::move(*token);
    };
  }
  return e;
}

ApiError from_transport(http::Error t) {
  ApiError e;
  e.reason = t.kind == http::ErrorKind::Transport ? ApiError::Reason::Transport
                                                  : ApiError::Reason::BadResponse;
  e.message = std::move(t.message);
  return e;
}

// What the http layer's retry rule needs to know about an answer. A
// transient ApiError is worth another attempt:
//  * TooManyRequests: the server (priority and fairness, max in-flight)
//    refused the request before handling it, whatever the verb;
//  * anything else transient (5xx, server timeouts) only for idempotent
//    calls: a POST that timed out may have created its object, and a JSON
//    patch may have been applied.
// Conflicts, Gone and the like are not transient: the caller must re-read.
// (Transport failures follow the http layer's rule: always before the
// request went out whole, else only when idempotent.)
http::Verdict classify(const http::Response& r) {
  ApiError e = decode_api_error(static_cast<int>(r.status), r.body, r.retry_after);
  http::Verdict v{.retry_after = e.retry_after};
  if (e.reason == ApiError::Reason::TooManyRequests) {
    v.retry = http::Retry::Always;
  } else if (e.transient()) {
    v.retry = http::Retry::IfIdempotent;
  }
  return v;
}

}  // namespace

Client::Client(asio::any_io_executor executor, ClusterConfig config, ClientOptions options)
    : Client(http::make_transport(std::move(executor), endpoint(std::move(config)), options),
             options) {}

Client::Client(std::unique_ptr<detail::Transport> transport, ClientOptions options)
    : http_(std::make_unique<http::Client>(std::move(transport), std::move(options))) {}

Client::~Client() = default;

asio::awaitable<std::expected<std::string, ApiError>> Client::send(Call call) {
  auto answer = co_await http_->send(std::move(call), classify);
  if (!answer) co_return std::unexpected(from_transport(std::move(answer.error())));
  if (answer->status >= 200 && answer->status <= 299) co_return std::move(answer->body);
  co_return std::unexpected(
      decode_api_error(static_cast<int>(answer->status), answer->body, answer->retry_after));
}

asio::awaitable<Result> Client::send_json(Call call) {
  auto body = co_await send(std::move(call));
  if (!body) co_return std::unexpected(std::move(body.error()));
  json j = json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    ApiError e;
    e.reason = ApiError::Reason::BadResponse;
    e.http_status = 200;
    e.message = "response is not JSON: " + body->substr(0, 200);
    co_return std::unexpected(std::move(e));
  }
  co_return j;
}

namespace {

// Stops the parse at the top-level object's metadata.generation (found) or
// at the end of its metadata (not there).
class GenerationReader final : public json::json_sax_t {
 public:
  std::optional<std::int64_t> generation;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t n) override { return number(n); }
  bool number_unsigned(number_unsigned_t n) override {
    return n <= static_cast<number_unsigned_t>(INT64_MAX) ? number(static_cast<std::int64_t>(n))
                                                          : value();
  }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 2 && key_ == Key::Metadata) in_metadata_ = true;
    key_ = Key::Other;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1 && k == "metadata") {
      key_ = Key::Metadata;
    } else if (depth_ == 2 && in_metadata_ && k == "generation") {
      key_ = Key::Generation;
    } else {
      key_ = Key::Other;
    }
    return true;
  }
  bool end_object() override {
    if (depth_ == 2 && in_metadata_) return false;  // metadata without generation
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth_;
    key_ = Key::Other;
    return depth_ > 1;  // the text is an object, not an array
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  enum class Key { Other, Metadata, Generation };
  bool value() {
    key_ = Key::Other;
    return true;
  }
  bool number(std::int64_t n) {
    if (key_ != Key::Generation) return value();
    generation = n;
    return false;  // found: stop here
  }
  int depth_ = 0;
  bool in_metadata_ = false;
  Key key_ = Key::Other;
};

}  // namespace

std::optional<std::int64_t> metadata_generation(std::string_view text) {
  GenerationReader reader;
  json::sax_parse(text, &reader);
  return reader.generation;
}

asio::awaitable<Result> Client::send_object(Call call, bool read_object) {
  if (read_object) co_return co_await send_json(std::move(call));
  auto body = co_await send(std::move(call));
  if (!body) co_return std::unexpected(std::move(body.error()));
  if (auto generation = metadata_generation(*body)) {
    co_return json{{"metadata", {{"generation", *generation}}}};
  }
  co_return json::object();
}

asio::awaitable<Result> Client::get(Resource r, std::string ns, std::string name,
                                    std::string subresource) {
  Call call{.target = resource_path(r, ns, name, subresource)};
  co_return co_await send_json(std::move(call));
}

asio::awaitable<Result> Client::list(Resource r, std::string ns, ListOptions o) {
  Call call{.target = resource_path(r, ns)};
  add_query(call.target, "labelSelector", o.label_selector);
  add_query(call.target, "fieldSelector", o.field_selector);
  if (o.limit) add_query(call.target, "limit", std::to_string(*o.limit));
  add_query(call.target, "continue", o.continue_token);
  add_query(call.target, "resourceVersion", o.resource_version);
  co_return co_await send_json(std::move(call));
}

asio::awaitable<Result> Client::list_all(Resource r, std::string ns, ListOptions o) {
  json all;
  for (;;) {
    auto page = co_await list(r, ns, o);
    if (!page) co_return std::unexpected(std::move(page.error()));
    json items = page->contains("items") && (*page)["items"].is_array()
                     ? std::move((*page)["items"])
                     : json::array();
    std::string next;
    if (auto m = page->find("metadata"); m != page->end() && m->is_object()) {
      next = string_member(*m, "continue");
    }
    if (all.is_null()) {
      all = std::move(*page);
      all["items"] = json::array();
    }
    for (auto& item : items) all["items"].push_back(std::move(item));
    if (next.empty()) break;
    o.continue_token = next;
    o.resource_version.clear();  // the token carries the snapshot; both is an error
  }
  if (auto m = all.find("metadata"); m != all.end() && m->is_object()) {
    m->erase("continue");
    m->erase("remainingItemCount");
  }
  co_return all;
}

namespace {
std::string write_query(std::string target, WriteOptions o) {
  add_query(target, "fieldManager", o.field_manager);
  if (o.dry_run) add_query(target, "dryRun", "All");
  return target;
}
}  // namespace

asio::awaitable<Result> Client::create(Resource r, std::string ns, json object, WriteOptions o) {
  Call call{.method = Verb::post,
            .target = write_query(resource_path(r, ns), o),
            .content_type = "application/json",
            .body = object.dump(),
            .idempotent = false};
  co_return co_await send_object(std::move(call), o.read_object);
}

asio::awaitable<Result> Client::replace(Resource r, std::string ns, std::string name, json object,
                                        WriteOptions o) {
  Call call{.method = Verb::put,
            .target = write_query(resource_path(r, ns, name, o.subresource), o),
            .content_type = "application/json",
            .body = object.dump()};
  co_return co_await send_object(std::move(call), o.read_object);
}

asio::awaitable<Result> Client::update_status(Resource r, std::string ns, std::string name,
                                              json object, WriteOptions o) {
  o.subresource = "status";
  co_return co_await replace(r, ns, name, object, o);
}

asio::awaitable<Result> Client::remove(Resource r, std::string ns, std::string name,
                                       DeleteOptions o) {
  Call call{.method = Verb::delete_, .target = resource_path(r, ns, name)};
  if (o.dry_run) add_query(call.target, "dryRun", "All");
  // Options go in a DeleteOptions body, the form every API server version accepts.
  json body = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
  if (!o.propagation_policy.empty()) body["propagationPolicy"] = o.propagation_policy;
  if (o.grace_period_seconds) body["gracePeriodSeconds"] = *o.grace_period_seconds;
  if (!o.precondition_uid.empty()) body["preconditions"]["uid"] = o.precondition_uid;
  if (!o.precondition_resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = o.precondition_resource_version;
  }
  call.content_type = "application/json";
  call.body = body.dump();
  co_return co_await send_json(std::move(call));
}

asio::awaitable<Result> Client::apply(Resource r, std::string ns, std::string name, json object,
                                      ApplyOptions o) {
  Call call{.method = Verb::patch,
            .target = resource_path(r, ns, name, o.subresource),
            // JSON is YAML, so the applied configuration is sent as JSON.
            .content_type = "application/apply-patch+yaml",
            .body = object.dump()};
  add_query(call.target, "fieldManager", o.field_manager);
  if (o.force) add_query(call.target, "force", "true");
  if (o.dry_run) add_query(call.target, "dryRun", "All");
  co_return co_await send_object(std::move(call), o.read_object);
}

asio::awaitable<Result> Client::merge_patch(Resource r, std::string ns, std::string name,
                                            json patch, WriteOptions o) {
  Call call{.method = Verb::patch,
            .target = write_query(resource_path(r, ns, name, o.subresource), o),
            .content_type = "application/merge-patch+json",
            .body = patch.dump()};
  co_return co_await send_object(std::move(call), o.read_object);
}

asio::awaitable<Result> Client::json_patch(Resource r, std::string ns, std::string name, json patch,
                                           WriteOptions o) {
  Call call{.method = Verb::patch,
            .target = write_query(resource_path(r, ns, name, o.subresource), o),
            .content_type = "application/json-patch+json",
            .body = patch.dump(),
            .idempotent = false};
  co_return co_await send_object(std::move(call), o.read_object);
}

asio::awaitable<std::expected<ServerVersion, ApiError>> Client::server_version() {
  Call call{.target = "/version"};
  auto j = co_await send_json(std::move(call));
  if (!j) co_return std::unexpected(std::move(j.error()));
  ServerVersion v{string_member(*j, "major"), string_member(*j, "minor"),
                  string_member(*j, "gitVersion")};
  co_return v;
}

asio::awaitable<std::expected<std::vector<DiscoveredResource>, ApiError>> Client::discover(
    std::string group_version) {
  std::string target = group_version.find('/') == std::string_view::npos
                           ? "/api/" + std::string{group_version}
                           : "/apis/" + std::string{group_version};
  Call call{.target = target};
  auto j = co_await send_json(std::move(call));
  if (!j) co_return std::unexpected(std::move(j.error()));
  std::vector<DiscoveredResource> out;
  if (auto rs = j->find("resources"); rs != j->end() && rs->is_array()) {
    for (const auto& r : *rs) {
      DiscoveredResource d{
          string_member(r, "name"), string_member(r, "kind"), r.value("namespaced", false), {}};
      if (auto v = r.find("verbs"); v != r.end() && v->is_array()) {
        for (const auto& verb : *v) {
          if (verb.is_string()) d.verbs.push_back(verb.get<std::string>());
        }
      }
      out.push_back(std::move(d));
    }
  }
  co_return out;
}

asio::awaitable<std::expected<std::string, ApiError>> Client::get_raw(std::string target) {
  Call call{.target = std::move(target), .accept = "*/*"};
  co_return co_await send(std::move(call));
}

asio::awaitable<std::expected<WatchEnd, ApiError>> Client::watch(Resource r, std::string ns,
                                                                 WatchOptions o,
                                                                 ChunkHandler on_chunk) {
  http::Request req{.target = resource_path(r, ns)};
  add_query(req.target, "watch", "1");
  add_query(req.target, "resourceVersion", o.resource_version);
  if (o.allow_bookmarks) add_query(req.target, "allowWatchBookmarks", "true");
  if (o.send_initial_events) {
    add_query(req.target, "sendInitialEvents", "true");
    add_query(req.target, "resourceVersionMatch", "NotOlderThan");
  }
  add_query(req.target, "labelSelector", o.label_selector);
  add_query(req.target, "fieldSelector", o.field_selector);
  if (o.timeout.count() > 0)
    add_query(req.target, "timeoutSeconds", std::to_string(o.timeout.count()));
  auto result = co_await http_->stream(std::move(req), std::move(on_chunk));
  if (!result) co_return std::unexpected(from_transport(std::move(result.error())));
  if (result->refused) {
    const auto& a = *result->refused;
    co_return std::unexpected(decode_api_error(static_cast<int>(a.status), a.body, a.retry_after));
  }
  co_return result->end;
}

}  // namespace gracekeeper::kube
