import Foundation

// The list of imported records a later local save validates, kept in store metadata entries.
extension ObjectContext {
    /// The metadata entry in which older versions listed imported records not validated yet
    /// (read, and moved to entries, for stores they wrote).
    static let deferredValidationKey = "concord.deferredValidation"

    /// The prefix of the metadata entries that each list an imported record not validated yet.
    static let deferredPrefix = "concord.deferred/"

    static func deferredKey(_ id: ObjectID) -> String { deferredPrefix + id.description }

    /// The records of `store` that imports listed for validation at the next local save.
    static func deferredValidation(in store: any PersistentStore) throws -> Set<ObjectID> {
        var ids = try legacyDeferredValidation(in: store)
        try store.enumerateMetadataEntries(withPrefix: deferredPrefix, batchSize: 4096) { batch in
            for (key, _) in batch {
                let text = key.dropFirst(deferredPrefix.count)
                guard let slash = text.firstIndex(of: "/"),
                    let uuid = UUID(uuidString: String(text[text.index(after: slash)...]))
                else {
                    continue
                }
                ids.insert(ObjectID(entity: String(text[..<slash]), uuid: uuid))
            }
        }
        return ids
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
        return ids
    }
}
