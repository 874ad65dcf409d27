import CConcordShims
import Foundation
import SystemPackage

/// Identifiers from the kernel's random source, the one place Concord makes them.
///
/// Foundation's `UUID()` on Linux reads `/dev/urandom` through a file descriptor and, when it
/// cannot open it (`EMFILE`, a sandbox), returns the same "random" UUID every time: a record id
/// made so silently replaces the record saved under it before. These come from `getrandom(2)`,
/// which needs no descriptor. When the kernel gives no randomness (a sandbox that denies
/// `getrandom`, a kernel without it), ``makeUUID()`` throws a ``SystemCallError`` for
/// `getrandom`, and ``uuid()`` stops the process: neither ever makes an id that may repeat.
public enum RandomSource {
    /// A random (version 4, RFC 9562) UUID: 122 random bits from `getrandom(2)`.
    ///
    /// - Throws: ``SystemCallError`` (call `getrandom`, with its errno) when the kernel gives no
    ///   randomness.
    public static func makeUUID() throws(SystemCallError) -> UUID {
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        try withUnsafeMutableBytes(of: &bytes) { (buffer) throws(SystemCallError) in
            var filled = 0
            while filled < buffer.count {
                let count = try retryingInterrupts("getrandom") {
                    concord_getrandom(buffer.baseAddress! + filled, buffer.count - filled)
                }
                filled += count
            }
        }
        bytes.6 = (bytes.6 & 0x0F) | 0x40
        bytes.8 = (bytes.8 & 0x3F) | 0x80
        return UUID(uuid: bytes)
    }

    /// A random (version 4) UUID, as ``makeUUID()`` makes it, for callers that cannot throw:
    /// when the kernel gives no randomness the process stops with the error rather than make an
    /// id that may repeat.
    public static func uuid() -> UUID {
        do {
            return try makeUUID()
        } catch {
            fatalError("Concord cannot make a unique identifier: no randomness from the kernel: \(error)")
        }
    }
}
