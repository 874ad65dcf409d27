import Foundation

/// The identity of one record: its entity and a UUID, stable for the record's whole life and the
/// same on every device.
public struct ObjectID: Hashable, Sendable, Codable, Comparable, CustomStringConvertible {
    /// The entity the record belongs to.
    public var entity: String
    /// The record's UUID.
    public var uuid: UUID

    /// An id for a record of `entity` with the given UUID.
    public init(entity: String, uuid: UUID) {
        self.entity = entity
        self.uuid = uuid
    }

    /// A new, random id (a version 4 UUID from the kernel's random source: never a repeat, even
    /// where Foundation's `UUID()` cannot open `/dev/urandom` and returns a constant).
    ///
    /// Should the kernel give no randomness, the process stops rather than make an id that may
    /// repeat; ``checkedRandom(entity:)`` throws instead.
    public static func random(entity: String) -> ObjectID {
        ObjectID(entity: entity, uuid: StoreMetadata.makeIdentifier())
    }

    /// A new random id, as ``random(entity:)`` makes it, or an error when the kernel gives no
    /// randomness (``PersistenceError/Reason/noRandomness``).
    public static func checkedRandom(entity: String) throws(PersistenceError) -> ObjectID {
        ObjectID(entity: entity, uuid: try StoreMetadata.makeCheckedIdentifier())
    }

    /// The one id every device derives for the record of `entity` known by `name` (a version 5,
    /// name-based UUID in Concord's namespace): creating "the default settings" or "the Inbox
    /// folder" on two devices makes the same record, not two.
    public static func deterministic(entity: String, name: String) -> ObjectID {
        ObjectID(entity: entity, uuid: UUID.nameBased(namespace: concordNamespace, name: entity + "\u{0}" + name))
    }

    /// Whether the id is name-based (a version 5 UUID, as ``deterministic(entity:name:)`` makes):
    /// every device can make it, so records may point at it before it exists here.
    public var isNameBased: Bool { uuid.uuid.6 >> 4 == 5 }

    /// Concord's namespace for name-based ids.
    public static let concordNamespace = UUID(uuidString: "6C0A7E1B-9D34-4F52-8B1E-3C5F0D2A9E47")!

    /// Hashes the UUID alone: it tells records apart, and a set of a folder's notes is built
    /// without hashing the entity's name once per note.
    public func hash(into hasher: inout Hasher) {
        withUnsafeBytes(of: uuid.uuid) { hasher.combine(bytes: $0) }
    }

    /// The same entity and UUID (the UUID compared first: it is the one that differs).
    public static func == (lhs: ObjectID, rhs: ObjectID) -> Bool {
        lhs.uuid == rhs.uuid && lhs.entity == rhs.entity
    }

    /// Ordered by entity, then by the UUID's bytes: the tie-breaker every device computes alike.
    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool {
        if lhs.entity != rhs.entity { return lhs.entity.utf8.lexicographicallyPrecedes(rhs.entity.utf8) }
        return withUnsafeBytes(of: lhs.uuid.uuid) { left in
            withUnsafeBytes(of: rhs.uuid.uuid) { right in left.lexicographicallyPrecedes(right) }
        }
    }

    /// `Entity/uuid`.
    public var description: String { description(after: "") }

    /// `prefix` followed by ``description``, made in one piece (metadata keys named after a
    /// record are made several times in every save).
    public func description(after prefix: String) -> String {
        var prefix = prefix
        var entity = entity
        return prefix.withUTF8 { head in
            entity.withUTF8 { name in
                String(unsafeUninitializedCapacity: head.count + name.count + 37) { text in
                    var at = 0
                    for byte in head {
                        text[at] = byte
                        at += 1
                    }
                    for byte in name {
                        text[at] = byte
                        at += 1
                    }
                    text[at] = UInt8(ascii: "/")
                    return uuid.writeLowercaseText(into: text, at: at + 1)
                }
            }
        }
    }
}

extension UUID {
    /// The UUID's canonical text (8-4-4-4-12 hexadecimal digits) in lowercase, formatted here:
    /// `uuidString` goes through the C library's `printf`, which stores and imports paid for
    /// once per record.
    var lowercaseText: String {
        String(unsafeUninitializedCapacity: 36) { writeLowercaseText(into: $0, at: 0) }
    }

    /// Writes ``lowercaseText`` (36 bytes) into `text` from `start`; returns where it ends.
    func writeLowercaseText(into text: UnsafeMutableBufferPointer<UInt8>, at start: Int) -> Int {
        withUnsafeBytes(of: uuid) { raw in
            func digit(_ value: UInt8) -> UInt8 { value < 10 ? 0x30 + value : 0x57 + value }
            var at = start
            for (index, byte) in raw.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    text[at] = UInt8(ascii: "-")
                    at += 1
                }
                text[at] = digit(byte >> 4)
                text[at + 1] = digit(byte & 0x0F)
                at += 2
            }
            return at
        }
    }
}

extension UUID {
    /// A version 5 (SHA-1, name-based) UUID, as RFC 9562 defines it.
    public static func nameBased(namespace: UUID, name: String) -> UUID {
        var bytes = withUnsafeBytes(of: namespace.uuid) { Array($0) }
        bytes.append(contentsOf: Array(name.utf8))
        var digest = Array(SHA1.digest(bytes).prefix(16))
        digest[6] = (digest[6] & 0x0f) | 0x50
        digest[8] = (digest[8] & 0x3f) | 0x80
        return digest.withUnsafeBytes { UUID(uuid: $0.load(as: uuid_t.self)) }
    }
}
