import Foundation

/// Identifiers from the kernel's random source, the one place Concord makes them.
///
/// Foundation's `UUID()` on Linux reads `/dev/urandom` through a file descriptor and, when it
/// cannot open it (`EMFILE`, a sandbox), returns the same "random" UUID every time: a record id
/// made so silently replaces the record saved under it before. These come from `getrandom(2)`
/// (through Swift's `SystemRandomNumberGenerator`), which needs no descriptor; should the kernel
/// give no randomness at all, the process traps rather than make an id that may repeat.
public enum RandomSource {
    /// A random (version 4, RFC 9562) UUID: 122 random bits.
    public static func uuid() -> UUID {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in stride(from: 0, to: 16, by: 8) {
            var word = generator.next()
            for offset in 0..<8 {
                bytes[index + offset] = UInt8(truncatingIfNeeded: word)
                word >>= 8
            }
        }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        return UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            )
        )
    }
}
