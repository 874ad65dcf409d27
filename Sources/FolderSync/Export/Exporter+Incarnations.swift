import Foundation
import Persistence

extension Exporter {
    /// What a log of `changes` lists as ``SyncPayload/incarnations``: for each record with a
    /// random id that the changes write without creating it, delete, or point at (and that the
    /// log does not create), the creation this store knows it by; for one the log creates again
    /// under the id of a record this store held, the creation it replaces. A device that holds two
    /// records made under that id (a creation conflict) applies the change to the one meant,
    /// whichever it met first. Clocks not in `entries` are read from the store in one go; a
    /// record without clocks (one that predates sync) is not listed.
    func incarnations(of changes: [SyncChange], entries: SyncMetadataSnapshot) throws -> [ObjectID: SyncClock] {
        let created = Set(changes.lazy.filter { $0.created != nil }.map(\.id))
        var wanted = Set<ObjectID>()
        func want(_ id: ObjectID) {
            if id.isRandom, !created.contains(id) { wanted.insert(id) }
        }
        var replaced: [ObjectID: SyncClock] = [:]
        for change in changes {
            // A creation under the id of a record this store held (deleted and made again in one
            // save) names the creation it replaces: made knowing it, it is no creation conflict.
            if let created = change.created, change.id.isRandom,
                let before = entries[SyncMetadata.recordClocks(change.id)]?.created, before != created
            {
                replaced[change.id] = before
            }
            if change.created == nil { want(change.id) }
            for write in change.references.values { if let target = write.target { want(target) } }
            for members in change.members.values { for member in members { want(member.target) } }
        }
        guard !wanted.isEmpty else { return replaced }
        var incarnations = replaced
        var unread: [any SyncMetadataNamed] = []
        for id in wanted {
            let key = SyncMetadata.recordClocks(id)
            guard entries.contains(key) else {
                unread.append(key)
                continue
            }
            incarnations[id] = entries[key]?.created
        }
        if !unread.isEmpty {
            let read = try store.syncMetadata(unread)
            for id in wanted where incarnations[id] == nil {
                incarnations[id] = read[SyncMetadata.recordClocks(id)]?.created
            }
        }
        return incarnations
    }
}
