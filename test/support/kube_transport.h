// The seam between kube::Client and sockets, under the names the kube tests
// use: the transport itself is http:: (include/gracekeeper/http/transport.h,
// and the exchange private to gk_http, src/http/exchange.h).
#pragma once

#include "../../src/http/exchange.h"
#include "gracekeeper/kube/client.h"

namespace gracekeeper::kube::detail {

using HttpRequest = gracekeeper::http::Request;
using HttpResponse = gracekeeper::http::Response;
using TransportError = gracekeeper::http::Error;
using StreamResult = gracekeeper::http::StreamResult;
using RequestHead = gracekeeper::http::detail::RequestHead;
using gracekeeper::http::detail::exchange;
using gracekeeper::http::detail::exchange_streaming;
using gracekeeper::http::detail::make_wire_request;
using gracekeeper::http::detail::use_nothrow;

}  // namespace gracekeeper::kube::detail
