// ParseByteSize: a byte count as users write it on the command line: "2GiB", "512MiB", "64k",
// "1e9", "1.5GB", "4096". Binary units (KiB, MiB, GiB, TiB, also K/M/G/T and k/m/g/t) are powers
// of 1024; decimal units (kB, MB, GB, TB) powers of 1000; a trailing "B" is optional.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve {

// InvalidArgument (naming the accepted forms) for anything else, a negative or non-finite
// number, or a value above 2^62.
Result<uint64_t> ParseByteSize(std::string_view text);

// "512 B", "3.5 KiB", "2.0 GiB": binary units with one decimal (the unit that keeps the number
// below 1024).
std::string FormatByteSize(uint64_t bytes);

}  // namespace kvserve
