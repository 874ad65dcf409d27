/// The name of one lock: a 128-bit hash of a canonical path and which of the path's two locks
/// it is. A value type, so naming the locks of a coordination allocates nothing; the lock file's
/// name is spelled out only when the file is first opened.
///
/// Distinct paths that collided would only share a lock (more exclusion than needed), never lose
/// one. The hash runs in one pass that also yields every ancestor's name, since a path's prefix
/// hashes to its ancestor's name.
struct LockName: Hashable, Comparable, Sendable {
    enum Kind: UInt8, Sendable {
        /// Shared to read the item, exclusive to write it.
        case item
        /// Shared by every access inside the directory; exclusive while the directory itself is
        /// deleted, moved or replaced.
        case tree
    }

    var high: UInt64
    var low: UInt64
    var kind: Kind

    static func < (lhs: LockName, rhs: LockName) -> Bool {
        (lhs.high, lhs.low, lhs.kind.rawValue) < (rhs.high, rhs.low, rhs.kind.rawValue)
    }

    /// The lock file's name: 32 hex digits and `.item` or `.tree`.
    var fileName: String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes = [UInt8](repeating: 0, count: 32)
        for index in 0..<16 {
            let shift = UInt64(60 - 4 * index)
            bytes[index] = digits[Int((high >> shift) & 0xf)]
            bytes[16 + index] = digits[Int((low >> shift) & 0xf)]
        }
        return String(decoding: bytes, as: UTF8.self) + (kind == .item ? ".item" : ".tree")
    }

    private struct Hasher {
        var high: UInt64 = 0xcbf2_9ce4_8422_2325
        var low: UInt64 = 0x6c62_272e_07bb_0142

        @inline(__always)
        mutating func add(_ byte: UInt8) {
            high = (high ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
            low = (low &+ UInt64(byte)) &* 0x9e37_79b9_7f4a_7c15
            low ^= low >> 29
        }
    }

    /// Calls `body` with the tree lock of every proper ancestor of `path` except `/` (outermost
    /// first), then with the item lock of `path` itself, then (if `tree`) with its tree lock.
    static func forEach(in path: String, tree: Bool, _ body: (LockName, _ isAncestor: Bool) -> Void) {
        var hasher = Hasher()
        var first = true
        for byte in path.utf8 {
            if byte == UInt8(ascii: "/") && !first {
                body(LockName(high: hasher.high, low: hasher.low, kind: .tree), true)
            }
            first = false
            hasher.add(byte)
        }
        body(LockName(high: hasher.high, low: hasher.low, kind: .item), false)
        if tree { body(LockName(high: hasher.high, low: hasher.low, kind: .tree), false) }
    }
}
