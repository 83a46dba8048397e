// gk-lab-app: the HTTP application the lab's load test hits during a rolling
// update. It shuts down like a Spring Boot app with server.shutdown=graceful:
// on SIGTERM the port closes at once, in-flight requests finish (answered with
// Connection: close), and the process exits when none is left or when the
// drain deadline passes. Every lifecycle step is one JSON line on stdout.
//
// Statically linked: the listen address is parsed numerically (no NSS).

#include <time.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <expected>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;
constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

constexpr std::int64_t kMaxCount = 2147483647;
constexpr std::uint64_t kMaxBody = 1024 * 1024;

constexpr std::string_view kUsage = R"(usage: gk-lab-app [flags]

An HTTP test application that shuts down like Spring Boot with
server.shutdown=graceful. Each flag can also be given as the environment
variable in brackets; the flag wins.

  --listen ADDR:PORT    numeric address to listen on, IPv6 in brackets
                        [APP_LISTEN] (default 0.0.0.0:8080; port 0: any free port)
  --work-ms N           how long POST /orders works, in ms [APP_WORK_MS] (default 20)
  --drain-seconds N     after SIGTERM, how long to wait for in-flight requests
                        and open connections [APP_DRAIN_SECONDS] (default 30)
  --idle-close-ms N     after SIGTERM, a keep-alive connection that has sent no
                        request for this long is closed by the app
                        [APP_IDLE_CLOSE_MS] (default 1000)
  --name S              name in every log line and answer [APP_NAME]
                        (default: $POD_NAME, else the hostname)
  --help                this text

Endpoints: POST /orders[?ms=N] -> 201 {"pod":NAME,"order":SEQ}; GET /ready -> 200,
503 after SIGTERM; GET /live -> 200.
)";

// ---------------------------------------------------------------- options

struct Options {
  std::string listen = "0.0.0.0:8080";
  tcp::endpoint endpoint;
  std::int64_t work_ms = 20;
  std::int64_t drain_seconds = 30;
  std::int64_t idle_close_ms = 1000;
  std::string name;
};

// A non-negative decimal integer no larger than kMaxCount.
std::optional<std::int64_t> parse_count(std::string_view text) {
  if (text.empty() || text.size() > 10) return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < 0 || value > kMaxCount) {
    return std::nullopt;
  }
  return value;
}

std::optional<tcp::endpoint> parse_endpoint(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::nullopt;  // IPv6 needs brackets
  }
  const auto port = parse_count(port_text);
  if (host.empty() || !port || *port > 65535) return std::nullopt;
  beast::error_code ec;
  const auto address = asio::ip::make_address(std::string{host}, ec);
  if (ec || address.is_v6() != bracketed) return std::nullopt;
  return tcp::endpoint{address, static_cast<unsigned short>(*port)};
}

std::string invalid(std::string_view source, std::string_view value, std::string_view expected) {
  return std::string{source} + ": invalid value \"" + std::string{value} + "\": expected " +
         std::string{expected};
}

struct Flag {
  std::string_view flag;
  const char* env;
  std::optional<std::string> value;  // from the command line
};

// Fills `out`; false: --help was asked for. Errors name the flag (or the
// environment variable) and the value.
std::expected<bool, std::string> parse_options(int argc, char** argv, Options& out) {
  Flag flags[] = {{"--listen", "APP_LISTEN", {}},
                  {"--work-ms", "APP_WORK_MS", {}},
                  {"--drain-seconds", "APP_DRAIN_SECONDS", {}},
                  {"--name", "APP_NAME", {}},
                  {"--idle-close-ms", "APP_IDLE_CLOSE_MS", {}}};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    std::string_view name = arg;
    std::optional<std::string_view> value;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    Flag* flag = nullptr;
    for (auto& f : flags) {
      if (f.flag == name) flag = &f;
    }
    if (!flag) {
      if (!arg.starts_with("-"))
        return std::unexpected("unexpected argument \"" + std::string{arg} + "\"");
      return std::unexpected("unknown flag \"" + std::string{name} + "\" (see --help)");
    }
    if (!value) {
      if (i + 1 >= argc) return std::unexpected(std::string{name} + ": missing value");
      value = argv[++i];
    }
    flag->value = std::string{*value};
  }

  // The flag, else a non-empty environment variable, else nothing (the default).
  auto pick = [](const Flag& f) -> std::optional<std::pair<std::string_view, std::string>> {
    if (f.value) return std::pair{f.flag, *f.value};
    const char* env = std::getenv(f.env);
    if (env && *env) return std::pair{std::string_view{f.env}, std::string{env}};
    return std::nullopt;
  };
  std::string_view listen_source = "--listen";
  if (auto v = pick(flags[0])) {
    listen_source = v->first;
    out.listen = v->second;
  }
  const auto endpoint = parse_endpoint(out.listen);
  if (!endpoint) {
    return std::unexpected(invalid(listen_source, out.listen,
                                   "IP:PORT with a numeric IP (IPv6 in brackets) and a port "
                                   "from 0 to 65535"));
  }
  out.endpoint = *endpoint;
  using Count = std::pair<const Flag*, std::int64_t*>;
  for (auto [flag, target] : {Count{&flags[1], &out.work_ms}, Count{&flags[2], &out.drain_seconds},
                              Count{&flags[4], &out.idle_close_ms}}) {
    if (auto v = pick(*flag)) {
      const auto n = parse_count(v->second);
      if (!n)
        return std::unexpected(invalid(v->first, v->second, "an integer from 0 to 2147483647"));
      *target = *n;
    }
  }
  if (auto v = pick(flags[3])) {
    out.name = v->second;
  } else if (const char* pod = std::getenv("POD_NAME"); pod && *pod) {
    out.name = pod;
  } else {
    char host[256] = {};
    out.name = gethostname(host, sizeof host - 1) == 0 && host[0] ? host : "unknown";
  }
  if (out.name.empty()) return std::unexpected(invalid(pick(flags[3])->first, "", "a name"));
  return true;
}

// ---------------------------------------------------------------- logging

struct Stamp {
  timespec mono{};
  timespec wall{};
};

Stamp now() {
  Stamp s;
  clock_gettime(CLOCK_MONOTONIC, &s.mono);
  clock_gettime(CLOCK_REALTIME, &s.wall);
  return s;
}

std::string mono_text(const timespec& t) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%06ld", static_cast<long long>(t.tv_sec), t.tv_nsec / 1000);
  return buf;
}

std::string wall_text(const timespec& t) {
  std::tm tm{};
  gmtime_r(&t.tv_sec, &tm);
  char buf[64];
  const auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03ldZ", t.tv_nsec / 1000000);
  return buf;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// One JSON object on one line: event, name, pid, mono, wall, then the fields.
class Line {
 public:
  Line(std::string_view event, const std::string& name, const Stamp& at = now()) {
    text_ = "{\"event\":" + json_string(event) + ",\"name\":" + json_string(name) +
            ",\"pid\":" + std::to_string(getpid()) + ",\"mono\":" + mono_text(at.mono) +
            ",\"wall\":\"" + wall_text(at.wall) + "\"";
  }
  Line& str(std::string_view key, std::string_view value) { return raw(key, json_string(value)); }
  Line& num(std::string_view key, std::int64_t value) { return raw(key, std::to_string(value)); }
  Line& raw(std::string_view key, std::string_view json) {
    text_ += ",\"";
    text_ += key;
    text_ += "\":";
    text_ += json;
    return *this;
  }
  void emit() {
    text_ += "}\n";
    std::fwrite(text_.data(), 1, text_.size(), stdout);
    std::fflush(stdout);
  }

 private:
  std::string text_;
};

// ---------------------------------------------------------------- the server

std::optional<std::string_view> query_param(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == key) {
      return eq == std::string_view::npos ? std::string_view{} : pair.substr(eq + 1);
    }
  }
  return std::nullopt;
}

Response answer(http::status status, std::string body,
                std::string_view content_type = "text/plain; charset=utf-8") {
  Response r{status, 11};
  r.set(http::field::content_type, content_type);
  r.body() = std::move(body);
  return r;
}

class App : public std::enable_shared_from_this<App> {
 public:
  App(asio::io_context& ioc, Options options)
      : ioc_(ioc),
        options_(std::move(options)),
        acceptor_(ioc),
        signals_(ioc),
        drain_(ioc),
        idle_close_(ioc) {}

  int run();

 private:
  // A request counts as in flight from the moment it has been read until its
  // answer has been written (or failed to be).
  class InFlight {
   public:
    explicit InFlight(App& app) : app_(app) { ++app_.in_flight_; }
    ~InFlight() {
      --app_.in_flight_;
      app_.finish_if_drained();
    }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    App& app_;
  };

  Line line(std::string_view event) const { return Line{event, options_.name}; }
  void wait_for_signal();
  void on_signal(int signal);
  void finish();
  // After SIGTERM: finishes once no request is in flight and no connection is
  // open. A keep-alive connection closes after its next answer (Connection:
  // close) or when it has been idle for idle_close_ms; exiting with idle
  // connections open would race a client's next POST (it gets EOF).
  void finish_if_drained() {
    if (shutting_down_ && in_flight_ == 0 && connections_ == 0) finish();
  }
  void close_idle_connections();
  static asio::awaitable<void> accept_loop(std::shared_ptr<App> self);
  static asio::awaitable<void> serve(std::shared_ptr<App> self, tcp::socket socket);
  asio::awaitable<Response> respond(const Request& request);

  asio::io_context& ioc_;
  Options options_;
  tcp::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer drain_;
  asio::steady_timer idle_close_;
  std::set<tcp::socket*> idle_;  // connections waiting for their next request

  bool shutting_down_ = false;
  bool finished_ = false;
  std::int64_t in_flight_ = 0;
  std::int64_t connections_ = 0;
  std::int64_t orders_ = 0;
  std::int64_t served_ = 0;
  std::int64_t served_after_sigterm_ = 0;
  std::optional<Stamp> last_response_;
  std::optional<Stamp> last_order_;  // the last 201 to POST /orders (probes not counted)
};

int App::run() {
  line("started")
      .str("listen", options_.listen)
      .num("work_ms", options_.work_ms)
      .num("drain_seconds", options_.drain_seconds)
      .num("idle_close_ms", options_.idle_close_ms)
      .emit();

  signals_.add(SIGTERM);
  signals_.add(SIGINT);
  wait_for_signal();

  beast::error_code ec;
  acceptor_.open(options_.endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(options_.endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  tcp::endpoint local;
  if (!ec) local = acceptor_.local_endpoint(ec);
  if (ec) {
    const std::string error = "cannot listen on " + options_.listen + ": " + ec.message();
    std::fprintf(stderr, "gk-lab-app: %s\n", error.c_str());
    line("exit").num("code", 1).str("error", error).emit();
    return 1;
  }
  line("listening").str("address", local.address().to_string()).num("port", local.port()).emit();

  asio::co_spawn(ioc_, accept_loop(shared_from_this()), asio::detached);
  ioc_.run();
  const int code = finished_ ? 0 : 1;
  line("exit").num("code", code).emit();
  return code;
}

void App::wait_for_signal() {
  signals_.async_wait([this](const beast::error_code& ec, int signal) {
    if (ec) return;
    on_signal(signal);
    wait_for_signal();
  });
}

void App::on_signal(int signal) {
  if (shutting_down_) return;  // a second signal changes nothing
  shutting_down_ = true;
  beast::error_code ignored;
  acceptor_.close(ignored);  // new connects are refused from here on
  line("sigterm")
      .str("signal", signal == SIGINT ? "SIGINT" : "SIGTERM")
      .num("in_flight", in_flight_)
      .num("connections", connections_)
      .raw("acceptor_closed", "true")
      .emit();
  if (in_flight_ == 0 && connections_ == 0) {
    finish();
    return;
  }
  idle_close_.expires_after(std::chrono::milliseconds{options_.idle_close_ms});
  idle_close_.async_wait([this](const beast::error_code& ec) {
    if (!ec && !finished_) close_idle_connections();
  });
  drain_.expires_after(std::chrono::seconds{options_.drain_seconds});
  drain_.async_wait([this](const beast::error_code& ec) {
    if (ec || finished_) return;
    line("drain_timeout")
        .num("in_flight", in_flight_)
        .num("drain_seconds", options_.drain_seconds)
        .emit();
    finish();
  });
}

// Runs once: the last answer is out (or the deadline passed). run() returns and
// the process exits; connections still open are closed by the exit.
void App::close_idle_connections() {
  // Closing a socket ends its pending read; its serve() then ends and counts
  // the connection gone. Copy first: that erases from idle_.
  const std::vector<tcp::socket*> idle{idle_.begin(), idle_.end()};
  for (tcp::socket* socket : idle) {
    beast::error_code ignored;
    socket->shutdown(tcp::socket::shutdown_send, ignored);
    socket->close(ignored);
  }
}

void App::finish() {
  if (finished_) return;
  finished_ = true;
  auto l = line("last_request");
  if (last_response_) {
    l.raw("last_response_mono", mono_text(last_response_->mono))
        .str("last_response_wall", wall_text(last_response_->wall));
  } else {
    l.raw("last_response_mono", "null").raw("last_response_wall", "null");
  }
  if (last_order_) {
    l.raw("last_order_mono", mono_text(last_order_->mono))
        .str("last_order_wall", wall_text(last_order_->wall));
  } else {
    l.raw("last_order_mono", "null").raw("last_order_wall", "null");
  }
  l.num("served", served_)
      .num("served_after_sigterm", served_after_sigterm_)
      .num("orders", orders_)
      .num("in_flight", in_flight_)
      .emit();
  drain_.cancel();
  idle_close_.cancel();
  ioc_.stop();
}

asio::awaitable<void> App::accept_loop(std::shared_ptr<App> self) {
  while (self->acceptor_.is_open()) {
    auto [ec, socket] = co_await self->acceptor_.async_accept(nothrow);
    if (!ec) {
      asio::co_spawn(self->ioc_, serve(self, std::move(socket)), asio::detached);
      continue;
    }
    if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) co_return;
    // Out of descriptors and the like: pause rather than spin.
    asio::steady_timer pause{self->ioc_, std::chrono::milliseconds{100}};
    co_await pause.async_wait(nothrow);
  }
}

// One connection: requests one after another (keep-alive) until the client
// closes, an error, or an answer with Connection: close. Errors are not logged.
asio::awaitable<void> App::serve(std::shared_ptr<App> self, tcp::socket socket) {
  App& app = *self;
  ++app.connections_;
  struct Count {
    App& app;
    ~Count() {
      --app.connections_;
      app.finish_if_drained();
    }
  } count{app};
  auto close = [&socket] {
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    socket.close(ignored);
  };

  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kMaxBody);
    app.idle_.insert(&socket);
    auto [ec, n] = co_await http::async_read(socket, buffer, parser, nothrow);
    app.idle_.erase(&socket);
    if (ec) break;  // the client closed, sent something that is not HTTP, or idle close
    const Request request = parser.release();
    InFlight in_flight{app};

    Response response = co_await app.respond(request);
    // Decided when the answer is written: after SIGTERM, every answer closes.
    const bool keep_alive = request.keep_alive() && !app.shutting_down_;
    response.version(request.version());
    response.set(http::field::server, "gk-lab-app");
    response.keep_alive(keep_alive);
    if (!keep_alive) response.set(http::field::connection, "close");
    if (request.method() == http::verb::head) {
      response.content_length(response.body().size());
      response.body().clear();
    } else {
      response.prepare_payload();
    }
    auto [wec, wn] = co_await http::async_write(socket, response, nothrow);
    if (!wec) {
      ++app.served_;
      if (app.shutting_down_) ++app.served_after_sigterm_;
      app.last_response_ = now();
      if (response.result() == http::status::created) app.last_order_ = app.last_response_;
    }
    if (wec || !keep_alive) {
      close();  // before in_flight ends: the exit it may trigger finds it closed
      co_return;
    }
  }
  close();
}

asio::awaitable<Response> App::respond(const Request& request) {
  const std::string_view target = request.target();
  const auto question = target.find('?');
  const std::string_view path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? std::string_view{} : target.substr(question + 1);
  const auto method = request.method();

  if (path == "/orders") {
    if (method != http::verb::post) {
      auto r = answer(http::status::method_not_allowed, "method not allowed");
      r.set(http::field::allow, "POST");
      co_return r;
    }
    std::int64_t ms = options_.work_ms;
    if (const auto param = query_param(query, "ms")) {
      const auto value = parse_count(*param);
      if (!value) {
        co_return answer(http::status::bad_request, "ms: expected an integer from 0 to 2147483647");
      }
      ms = *value;
    }
    const std::int64_t order = ++orders_;
    asio::steady_timer work{ioc_, std::chrono::milliseconds{ms}};
    co_await work.async_wait(nothrow);
    co_return answer(
        http::status::created,
        "{\"pod\":" + json_string(options_.name) + ",\"order\":" + std::to_string(order) + "}",
        "application/json");
  }
  if (path == "/ready" || path == "/live") {
    if (method != http::verb::get && method != http::verb::head) {
      auto r = answer(http::status::method_not_allowed, "method not allowed");
      r.set(http::field::allow, "GET, HEAD");
      co_return r;
    }
    if (path == "/ready" && shutting_down_) {
      co_return answer(http::status::service_unavailable, "shutting down");
    }
    co_return answer(http::status::ok, "ok");
  }
  co_return answer(http::status::not_found, "not found");
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the drain
  Options options;
  const auto parsed = parse_options(argc, argv, options);
  if (!parsed) {
    std::fprintf(stderr, "gk-lab-app: %s\n", parsed.error().c_str());
    return 2;
  }
  if (!*parsed) {
    std::fwrite(kUsage.data(), 1, kUsage.size(), stdout);
    return 0;
  }
  asio::io_context ioc{1};
  return std::make_shared<App>(ioc, std::move(options))->run();
}
