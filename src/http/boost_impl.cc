// Boost.Asio and Boost.Beast compiled once, here, for the whole program: kvserve_http defines
// BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION for itself and for every
// target that links it, so the other files that include them compile declarations and
// templates only, not the libraries' non-template code again in each file.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
