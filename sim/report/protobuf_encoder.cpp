#include "sim/report/protobuf_encoder.h"

namespace shardsim::sim {

namespace {

enum WireType { kVarint = 0, kLengthDelimited = 2 };

void append_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

int varint_size(std::uint64_t value) {
  int size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

}  // namespace

void ProtobufEncoder::varint(std::uint64_t value) { append_varint(bytes_, value); }

void ProtobufEncoder::tag(int field, int wire_type) {
  varint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}

void ProtobufEncoder::uint64_field(int field, std::uint64_t value, Presence presence) {
  if (value == 0 && presence == Presence::implicit) return;
  tag(field, kVarint);
  varint(value);
}

void ProtobufEncoder::int64_field(int field, std::int64_t value, Presence presence) {
  // Two's complement: a negative value takes all ten bytes, as the spec says.
  uint64_field(field, static_cast<std::uint64_t>(value), presence);
}

void ProtobufEncoder::string_field(int field, std::string_view value, Presence presence) {
  if (value.empty() && presence == Presence::implicit) return;
  bytes_field(field, value);
}

void ProtobufEncoder::bytes_field(int field, std::string_view value) {
  tag(field, kLengthDelimited);
  varint(value.size());
  bytes_.append(value);
}

void ProtobufEncoder::packed_uint64_field(int field, std::span<const std::uint64_t> values) {
  if (values.empty()) return;
  std::uint64_t size = 0;
  for (std::uint64_t value : values) size += varint_size(value);
  tag(field, kLengthDelimited);
  varint(size);
  for (std::uint64_t value : values) varint(value);
}

void write_delimited(std::ostream& out, const ProtobufEncoder& message) {
  std::string size;
  append_varint(size, message.bytes().size());
  out.write(size.data(), static_cast<std::streamsize>(size.size()));
  out.write(message.bytes().data(), static_cast<std::streamsize>(message.bytes().size()));
}

}  // namespace shardsim::sim
