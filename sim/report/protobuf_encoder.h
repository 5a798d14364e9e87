// ProtobufEncoder: the Protocol Buffers wire format (proto3), enough of it
// to write a schema's messages field by field without the protobuf library
// or generated code. shardsim writes one schema this way (Chakra execution
// traces, step/chakra_trace.h); three message types do not justify a code
// generator and a dependency the design does not otherwise need.
//
// Encoding as protobuf.dev/programming-guides/encoding describes it: each
// field is a tag (field number << 3 | wire type) as a varint, then its value:
// varints for integers, bools and enums (negative int32/int64 as ten-byte
// two's complement), length-delimited bytes for strings, nested messages and
// packed repeated scalars. As proto3 serializers do, a plain scalar field
// equal to its default (0, false, "") is left out; a decoder reads it back as
// the default.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

namespace shardsim::sim {

class ProtobufEncoder {
 public:
  // proto3 leaves a scalar field equal to its default out (implicit
  // presence); a member of a oneof is written whatever its value, since
  // which member is set is itself information (explicit presence).
  enum class Presence { implicit, explicit_ };

  void uint64_field(int field, std::uint64_t value, Presence presence = Presence::implicit);
  void int64_field(int field, std::int64_t value, Presence presence = Presence::implicit);
  void int32_field(int field, std::int32_t value, Presence presence = Presence::implicit) {
    int64_field(field, value, presence);
  }
  void bool_field(int field, bool value, Presence presence = Presence::implicit) {
    uint64_field(field, value ? 1 : 0, presence);
  }
  void string_field(int field, std::string_view value, Presence presence = Presence::implicit);
  // A nested message, already encoded.
  void message_field(int field, const ProtobufEncoder& message) { bytes_field(field, message.bytes()); }
  // A repeated uint64 in proto3's default packed form: one length-delimited
  // field holding the varints; nothing when empty.
  void packed_uint64_field(int field, std::span<const std::uint64_t> values);

  const std::string& bytes() const { return bytes_; }
  void clear() { bytes_.clear(); }

 private:
  void varint(std::uint64_t value);
  void tag(int field, int wire_type);
  void bytes_field(int field, std::string_view value);

  std::string bytes_;
};

// Writes `message` as one length-delimited record: its size as a varint,
// then its bytes (protobuf's "delimited" stream, as Chakra's and gem5's
// protoio read it).
void write_delimited(std::ostream& out, const ProtobufEncoder& message);

}  // namespace shardsim::sim
