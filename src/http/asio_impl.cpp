// Asio, its SSL support and Beast, compiled once for the whole program
// (BOOST_ASIO_SEPARATE_COMPILATION / BOOST_BEAST_SEPARATE_COMPILATION are set
// on gk_http, the lowest module using them, and reach every module above it
// through its PUBLIC compile definitions): every other file includes only the headers it uses and
// does not pay for the implementations again. See docs/architecture.md, "Modules".
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
