// Boost.Asio and Boost.Beast compiled once, here, for the whole program: kvserve_http defines
// BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION for itself and for every
// target that links it, so the other files that include them compile declarations and
// templates only, not the libraries' non-template code again in each file.
//
// Of Beast, the parts kvserve uses: core and HTTP (what <boost/beast/src.hpp> lists for them).
// Its WebSocket, zlib and test-stream parts are left out: nothing here calls them (a call would
// fail to link), and they took a third of this file's compile time.
#include <boost/asio/impl/src.hpp>

#define BOOST_BEAST_SOURCE  // as <boost/beast/src.hpp> defines it: explicit instantiations too
#include <boost/beast/core/detail/config.hpp>
#include <boost/beast/core/detail/base64.ipp>
#include <boost/beast/core/detail/impl/temporary_buffer.ipp>
#include <boost/beast/core/detail/sha1.ipp>
#include <boost/beast/core/impl/error.ipp>
#include <boost/beast/core/impl/file_posix.ipp>
#include <boost/beast/core/impl/file_stdio.ipp>
#include <boost/beast/core/impl/flat_static_buffer.ipp>
#include <boost/beast/core/impl/saved_handler.ipp>
#include <boost/beast/core/impl/static_buffer.ipp>
#include <boost/beast/core/impl/string.ipp>
#include <boost/beast/http/detail/basic_parser.ipp>
#include <boost/beast/http/detail/rfc7230.ipp>
#include <boost/beast/http/impl/basic_parser.ipp>
#include <boost/beast/http/impl/error.ipp>
#include <boost/beast/http/impl/field.ipp>
#include <boost/beast/http/impl/fields.ipp>
#include <boost/beast/http/impl/rfc7230.ipp>
#include <boost/beast/http/impl/status.ipp>
#include <boost/beast/http/impl/verb.ipp>
