/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI, ext4 and SCTP use it.
package enum CRC32C {
    /// Eight tables of 256 (slicing by eight): `tables[k * 256 + b]` is the CRC of byte `b`
    /// followed by `k` zero bytes, so eight bytes are folded in per step.
    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for index in 0..<256 {
            var crc = UInt32(index)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[index] = crc
        }
        for slice in 1..<8 {
            for index in 0..<256 {
                let previous = tables[(slice - 1) * 256 + index]
                tables[slice * 256 + index] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// The checksum of `bytes`.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        finalize(update(initial, bytes))
    }

    /// The running value before any byte: ``update(_:_:)`` it chunk by chunk, then
    /// ``finalize(_:)``.
    static let initial: UInt32 = 0xFFFF_FFFF

    /// The running value `crc` after `bytes` more.
    static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        tables.withUnsafeBufferPointer { table in
            var crc = crc
            var offset = 0
            let count = bytes.count
            while count - offset >= 8 {
                // Little-endian words: the first byte of the eight is the lowest.
                let low = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) ^ crc
                let high = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
                crc =
                    table[7 * 256 + Int(low & 0xFF)] ^ table[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ table[5 * 256 + Int((low >> 16) & 0xFF)] ^ table[4 * 256 + Int(low >> 24)]
                    ^ table[3 * 256 + Int(high & 0xFF)] ^ table[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ table[1 * 256 + Int((high >> 16) & 0xFF)] ^ table[Int(high >> 24)]
                offset += 8
            }
            while offset < count {
                crc = table[Int((crc ^ UInt32(bytes[offset])) & 0xFF)] ^ (crc >> 8)
                offset += 1
            }
            return crc
        }
    }

    /// The checksum of everything a running value went through.
    static func finalize(_ crc: UInt32) -> UInt32 { crc ^ 0xFFFF_FFFF }

    /// The checksum of `bytes`.
    package static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }
}
