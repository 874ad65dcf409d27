import Foundation
import Persistence

// The compact binary form of what sync writes most: the changes in a log's payload (log format
// version 2) and the per-record clocks in a store's metadata. JSON (format version 1, and clocks
// written before) stays readable. Decoding never trusts a length: every count and size is checked
// against the bytes left, so damaged input throws `BinaryCodecError`, never traps or allocates
// what the input claims.
//
// Integers are LEB128 varints (signed ones zigzag-encoded); strings are a varint byte count and
// UTF-8; doubles and dates are their IEEE-754 bits, 8 bytes little-endian; an optional is a byte
// 0 or 1 and then the value; a dictionary is a count and then key-value pairs in key order (so
// equal values encode to equal bytes).

/// Why bytes could not be decoded.
struct BinaryCodecError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Appends values to a byte buffer.
struct BinaryWriter {
    private(set) var bytes: [UInt8] = []

    init(reservingCapacity capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    mutating func byte(_ value: UInt8) { bytes.append(value) }

    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    mutating func signed(_ value: Int64) { varint(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }

    mutating func fixed64(_ value: UInt64) {
        for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
    }

    mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    mutating func data(_ value: Data) {
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    mutating func uuid(_ value: UUID) {
        withUnsafeBytes(of: value.uuid) { bytes.append(contentsOf: $0) }
    }
}

/// Reads values back, checking every length against what is left.
struct BinaryReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ data: Data) { bytes = [UInt8](data) }
    init(_ bytes: [UInt8], from offset: Int) {
        self.bytes = bytes
        self.offset = offset
    }

    var isAtEnd: Bool { offset == bytes.count }
    /// Where the next read starts.
    var position: Int { offset }

    mutating func byte() throws(BinaryCodecError) -> UInt8 {
        guard offset < bytes.count else { throw BinaryCodecError("ends early (a byte at \(offset))") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func varint() throws(BinaryCodecError) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let next = try byte()
            guard shift < 64, shift < 63 || next <= 1 else {
                throw BinaryCodecError("a varint at \(offset) is too long")
            }
            result |= UInt64(next & 0x7F) << shift
            if next & 0x80 == 0 { return result }
            shift += 7
        }
    }

    mutating func signed() throws(BinaryCodecError) -> Int64 {
        let raw = try varint()
        return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
    }

    /// A count of items each at least `minimumSize` bytes long: no more than the bytes left allow.
    mutating func count(minimumSize: Int = 1) throws(BinaryCodecError) -> Int {
        let value = try varint()
        guard value <= UInt64(bytes.count - offset) / UInt64(max(minimumSize, 1)) else {
            throw BinaryCodecError("a count of \(value) at \(offset) exceeds the bytes left")
        }
        return Int(value)
    }

    mutating func fixed64() throws(BinaryCodecError) -> UInt64 {
        guard bytes.count - offset >= 8 else { throw BinaryCodecError("ends early (8 bytes at \(offset))") }
        var value: UInt64 = 0
        for index in 0..<8 { value |= UInt64(bytes[offset + index]) << UInt64(8 * index) }
        offset += 8
        return value
    }

    mutating func raw(_ count: Int) throws(BinaryCodecError) -> ArraySlice<UInt8> {
        guard count >= 0, bytes.count - offset >= count else {
            throw BinaryCodecError("ends early (\(count) bytes at \(offset))")
        }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    mutating func string() throws(BinaryCodecError) -> String {
        let length = try count()
        guard let text = String(validating: try raw(length), as: UTF8.self) else {
            throw BinaryCodecError("a string at \(offset) is not UTF-8")
        }
        return text
    }

    mutating func data() throws(BinaryCodecError) -> Data { Data(try raw(try count())) }

    mutating func uuid() throws(BinaryCodecError) -> UUID {
        let raw = try raw(16)
        var value: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &value) { $0.copyBytes(from: raw) }
        return UUID(uuid: value)
    }

    mutating func flag() throws(BinaryCodecError) -> Bool {
        switch try byte() {
        case 0: return false
        case 1: return true
        case let other: throw BinaryCodecError("a flag at \(offset - 1) is \(other), not 0 or 1")
        }
    }
}
