// MessagePack writer for the KV event batch (kv_event_encoder.h). Formats: the MessagePack
// specification's fixarray/array16/array32, positive and negative fixint, uint8..64, int8..64,
// float64, fixstr/str8/16/32, bin8/16/32 and nil, each integer and length in its shortest form,
// as msgspec writes them.
#include "events/kv_event_encoder.h"

#include <cstring>

namespace kvserve {
namespace {

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}

  void Nil() { Byte(0xc0); }
  void Array(size_t n) {
    if (n < 16) {
      Byte(static_cast<uint8_t>(0x90 | n));
    } else if (n <= 0xffff) {
      Byte(0xdc);
      Be(n, 2);
    } else {
      Byte(0xdd);
      Be(n, 4);
    }
  }
  void Uint(uint64_t v) {
    if (v < 128) {
      Byte(static_cast<uint8_t>(v));
    } else if (v <= 0xff) {
      Byte(0xcc);
      Be(v, 1);
    } else if (v <= 0xffff) {
      Byte(0xcd);
      Be(v, 2);
    } else if (v <= 0xffffffffull) {
      Byte(0xce);
      Be(v, 4);
    } else {
      Byte(0xcf);
      Be(v, 8);
    }
  }
  void Int(int64_t v) {
    if (v >= 0) return Uint(static_cast<uint64_t>(v));
    const uint64_t u = static_cast<uint64_t>(v);
    if (v >= -32) {
      Byte(static_cast<uint8_t>(u));
    } else if (v >= -128) {
      Byte(0xd0);
      Be(u, 1);
    } else if (v >= -32768) {
      Byte(0xd1);
      Be(u, 2);
    } else if (v >= INT32_MIN) {
      Byte(0xd2);
      Be(u, 4);
    } else {
      Byte(0xd3);
      Be(u, 8);
    }
  }
  void Float64(double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    Byte(0xcb);
    Be(bits, 8);
  }
  void Str(std::string_view s) {
    const size_t n = s.size();
    if (n < 32) {
      Byte(static_cast<uint8_t>(0xa0 | n));
    } else if (n <= 0xff) {
      Byte(0xd9);
      Be(n, 1);
    } else if (n <= 0xffff) {
      Byte(0xda);
      Be(n, 2);
    } else {
      Byte(0xdb);
      Be(n, 4);
    }
    out_->append(s);
  }
  void Bin(const uint8_t* data, size_t n) {
    if (n <= 0xff) {
      Byte(0xc4);
      Be(n, 1);
    } else if (n <= 0xffff) {
      Byte(0xc5);
      Be(n, 2);
    } else {
      Byte(0xc6);
      Be(n, 4);
    }
    out_->append(reinterpret_cast<const char*>(data), n);
  }
  void Hash(const VllmBlockHash& h, BlockHashForm form) {
    if (form == BlockHashForm::kInt64) {
      Uint(VllmHashToU64(h));
    } else {
      Bin(h.data(), h.size());
    }
  }
  void OptionalStr(const std::string& s) {
    if (s.empty()) {
      Nil();
    } else {
      Str(s);
    }
  }

 private:
  void Byte(uint8_t b) { out_->push_back(static_cast<char>(b)); }
  void Be(uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) Byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::string* out_;
};

void Encode(const BlockStoredEvent& e, BlockHashForm form, Writer& w) {
  const bool extra = !e.first_block_salt.empty();
  w.Array(extra ? 9 : 8);
  w.Str("BlockStored");
  w.Array(e.block_hashes.size());
  for (const VllmBlockHash& h : e.block_hashes) w.Hash(h, form);
  if (e.parent_block_hash) {
    w.Hash(*e.parent_block_hash, form);
  } else {
    w.Nil();
  }
  w.Array(e.token_ids.size());
  for (int32_t t : e.token_ids) w.Int(t);
  w.Int(e.block_size);
  w.Nil();  // lora_id
  w.OptionalStr(e.medium);
  w.Nil();      // lora_name
  if (extra) {  // extra_keys: [cache_salt] for the first block, nil for the others
    w.Array(e.block_hashes.size());
    for (size_t i = 0; i < e.block_hashes.size(); ++i) {
      if (i == 0) {
        w.Array(1);
        w.Str(e.first_block_salt);
      } else {
        w.Nil();
      }
    }
  }
}

void Encode(const BlockRemovedEvent& e, BlockHashForm form, Writer& w) {
  w.Array(3);
  w.Str("BlockRemoved");
  w.Array(e.block_hashes.size());
  for (const VllmBlockHash& h : e.block_hashes) w.Hash(h, form);
  w.OptionalStr(e.medium);
}

void Encode(const AllBlocksClearedEvent&, BlockHashForm, Writer& w) {
  w.Array(1);
  w.Str("AllBlocksCleared");
}

}  // namespace

void EncodeKvEventBatch(double ts, std::span<const KvEvent> events, int data_parallel_rank,
                        BlockHashForm form, std::string* out) {
  Writer w(out);
  w.Array(3);
  w.Float64(ts);
  w.Array(events.size());
  for (const KvEvent& e : events) {
    std::visit([&](const auto& ev) { Encode(ev, form, w); }, e);
  }
  w.Int(data_parallel_rank);
}

}  // namespace kvserve
