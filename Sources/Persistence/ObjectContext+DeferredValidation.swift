import Foundation
import Synchronization

// The list of imported records a later local save validates, kept in store metadata entries.
extension ObjectContext {
    /// The metadata entry in which older versions listed imported records not validated yet
    /// (read, and moved to entries, for stores they wrote).
    static let deferredValidationKey = "concord.deferredValidation"

    /// The prefix of the metadata entries that each list an imported record not validated yet:
    /// `concord.deferred/STAMP/ENTITY/UUID`, where the stamp (the commit's time, then a
    /// per-process nonce and counter) orders the entries one commit writes after those written
    /// before, so an import's entries land together at the end of the list instead of one page
    /// each across it. Entries of earlier versions (`concord.deferred/ENTITY/UUID`) are read too.
    static let deferredPrefix = "concord.deferred/"

    /// The keys under which one commit lists records for validation: ``deferredPrefix``, a stamp
    /// unique to the commit and after the stamps of earlier commits (their time first), then the
    /// record's id.
    struct DeferredKeys {
        let stamp: String

        init(now: Date = Date()) {
            let milliseconds = UInt64(max(0, now.timeIntervalSince1970 * 1000))
            let counter = DeferredKeys.counter.add(1, ordering: .relaxed).oldValue
            stamp =
                DeferredKeys.hex(milliseconds, digits: 12) + "." + DeferredKeys.nonce
                + DeferredKeys.hex(counter, digits: 8)
        }

        func key(_ id: ObjectID) -> String { ObjectContext.deferredPrefix + stamp + "/" + id.description }

        private static let counter = Atomic<UInt64>(0)
        private static let nonce = hex(UInt64.random(in: 0...UInt64(UInt32.max)), digits: 8)

        private static func hex(_ value: UInt64, digits: Int) -> String {
            let text = String(value & (digits >= 16 ? .max : (1 << (4 * UInt64(digits))) - 1), radix: 16)
            return String(repeating: "0", count: max(0, digits - text.count)) + text
        }
    }

    /// One entry of a deferred-validation list.
    struct DeferredEntry {
        /// The metadata key.
        let key: String
        /// The record it lists.
        let id: ObjectID
        /// The references the import that wrote it added to the record (the only ones a
        /// validation looks up: the record's other references were judged when they were
        /// saved), or `nil` for every reference: an imported insert, an entry of an earlier
        /// version, one a local save kept.
        let references: Set<ObjectID>?
    }

    /// The most references an entry lists; past it, the entry asks for every reference to be
    /// looked up (as many lookups, and no large entry).
    static let listedReferenceLimit = 1024

    /// The value of an entry that lists `references` (`nil`: every reference).
    static func deferredValue(references: Set<ObjectID>?) -> Data {
        guard let references, references.count <= listedReferenceLimit else { return Data() }
        return encodeDeferred(references)
    }

    /// The entries of `store` that list records for validation at the next local save, with the
    /// record each names (entries of either form; names that are not a record's are passed over).
    static func deferredEntries(in store: any PersistentStore) throws -> [DeferredEntry] {
        var found: [DeferredEntry] = []
        try store.enumerateMetadataEntries(withPrefix: deferredPrefix, batchSize: 4096) { batch in
            for (key, value) in batch {
                // `ENTITY/UUID` (earlier versions) or `STAMP/ENTITY/UUID`.
                let text = key.dropFirst(deferredPrefix.count)
                guard let last = text.lastIndex(of: "/"),
                    let uuid = UUID(uuidString: String(text[text.index(after: last)...]))
                else { continue }
                let head = text[..<last]
                let entity = head.firstIndex(of: "/").map { head[head.index(after: $0)...] } ?? head
                guard !entity.isEmpty, !entity.contains("/") else { continue }
                // An empty value (or one this version cannot read): every reference.
                let references = value.first == deferredMarker ? decodeReferences(value) : nil
                found.append(
                    DeferredEntry(key: key, id: ObjectID(entity: String(entity), uuid: uuid), references: references)
                )
            }
        }
        return found
    }

    /// The records of `store` that imports listed for validation at the next local save.
    static func deferredValidation(in store: any PersistentStore) throws -> Set<ObjectID> {
        try legacyDeferredValidation(in: store).union(deferredEntries(in: store).map(\.id))
    }

    static func legacyDeferredValidation(in store: any PersistentStore) throws -> Set<ObjectID> {
        guard let data = try store.metadataEntries(forKeys: [deferredValidationKey])[deferredValidationKey] else {
            return []
        }
        if data.first == deferredMarker { return decodeDeferred(data) }
        // Lists written before the compact form: JSON.
        return Set((try? JSONDecoder().decode([ObjectID].self, from: data)) ?? [])
    }

    /// The first byte of the compact form of the deferred-validation list: then, per id, the
    /// entity name's length (2 bytes, big-endian), its UTF-8 bytes and the UUID's 16 bytes, in id
    /// order. (An import can list thousands of ids; JSON made every import save pay for them.)
    static let deferredMarker: UInt8 = 0xC4

    static func encodeDeferred(_ ids: Set<ObjectID>) -> Data {
        var bytes: [UInt8] = [deferredMarker]
        bytes.reserveCapacity(1 + ids.count * 28)
        for id in ids.sorted() {
            let name = id.entity.utf8.prefix(Int(UInt16.max))
            bytes.append(UInt8(name.count >> 8))
            bytes.append(UInt8(name.count & 0xFF))
            bytes.append(contentsOf: name)
            withUnsafeBytes(of: id.uuid.uuid) { bytes.append(contentsOf: $0) }
        }
        return Data(bytes)
    }

    /// The ids of the compact form; what follows a damaged entry is dropped (the list only says
    /// what to validate again: a record left out is validated at its next change).
    static func decodeDeferred(_ data: Data) -> Set<ObjectID> {
        decodeIDs(data).ids
    }

    /// The references an entry lists, or `nil` (every reference) when its value is damaged: a
    /// reference left out would never be looked up.
    static func decodeReferences(_ data: Data) -> Set<ObjectID>? {
        let decoded = decodeIDs(data)
        return decoded.complete ? decoded.ids : nil
    }

    /// The ids of the compact form, and whether every byte was read.
    private static func decodeIDs(_ data: Data) -> (ids: Set<ObjectID>, complete: Bool) {
        let bytes = [UInt8](data)
        var ids = Set<ObjectID>()
        var offset = 1
        while bytes.count - offset >= 2 {
            let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
            offset += 2
            guard bytes.count - offset >= length + 16,
                let entity = String(validating: bytes[offset..<offset + length], as: UTF8.self)
            else { break }
            offset += length
            var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &uuid) { $0.copyBytes(from: bytes[offset..<offset + 16]) }
            offset += 16
            ids.insert(ObjectID(entity: entity, uuid: UUID(uuid: uuid)))
        }
        return (ids, offset == bytes.count)
    }
}
