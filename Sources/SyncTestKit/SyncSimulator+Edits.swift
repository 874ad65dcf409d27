import Foundation
import Persistence

extension SyncSimulator {
    /// One random save of one to three changes to `coordinator`'s records of ``schema``: inserts,
    /// updates, deletes and relationship changes drawn from `random`. The simulator's devices and
    /// the multi-process sync test's helper processes edit with it.
    @discardableResult
    public static func saveRandomEdits(
        in coordinator: StoreCoordinator,
        random: inout SimulationRandom
    ) throws -> ChangeSet {
        let context = ObjectContext(coordinator: coordinator, origin: .local, name: "edit")
        let folders = try context.fetch(FetchRequest(entity: "Folder"))
        let notes = try context.fetch(FetchRequest(entity: "Note"))
        let tags = try context.fetch(FetchRequest(entity: "Tag"))
        let unique = !coordinator.policies.uniqueEntities.isEmpty
        for _ in 0..<(1 + random.below(3)) {
            switch random.below(12) {
            case 0:
                var folder = try context.insert(
                    entity: "Folder",
                    id: random.id("Folder"),
                    values: ["name": .string("f\(random.below(20))")]
                )
                if random.chance(40), let parent = random.pick(folders), try context.record(with: parent.id) != nil {
                    folder.toOne["parent"] = parent.id
                    try context.update(folder)
                }
            case 1, 2:
                // Now and then a note with a deterministic id, which several devices create, and
                // create again after a deletion.
                let named =
                    random.chance(20) ? ObjectID.deterministic(entity: "Note", name: "shared \(random.below(3))") : nil
                if let named, try context.record(with: named) != nil { continue }
                var note = try context.insert(
                    entity: "Note",
                    id: named ?? random.id("Note"),
                    values: ["title": .string("n\(random.below(1000))")]
                )
                if let folder = random.pick(folders), try context.record(with: folder.id) != nil {
                    note.toOne["folder"] = folder.id
                    try context.update(note)
                }
            case 3:
                let named =
                    random.chance(20) ? ObjectID.deterministic(entity: "Tag", name: "shared \(random.below(3))") : nil
                if let named, try context.record(with: named) != nil { continue }
                try context.insert(
                    entity: "Tag",
                    id: named ?? random.id("Tag"),
                    values: ["label": .string("t\(random.below(20))")]
                )
            case 4, 5:
                if let note = random.pick(notes), var current = try context.record(with: note.id) {
                    current["title"] = .string("n\(random.below(1000))")
                    if random.chance(50) { current["rank"] = .integer(Int64(random.below(10))) }
                    try context.update(current)
                }
            case 6:
                if let note = random.pick(notes), var current = try context.record(with: note.id) {
                    let folder = random.chance(80) ? random.pick(folders)?.id : nil
                    current.toOne["folder"] = try folder.flatMap { try context.record(with: $0) }?.id
                    try context.update(current)
                }
            case 7, 8:
                if let note = random.pick(notes), let tag = random.pick(tags),
                    var current = try context.record(with: note.id),
                    try context.record(with: tag.id) != nil
                {
                    var set = current.toMany["tags"] ?? []
                    if set.contains(tag.id) { set.remove(tag.id) } else { set.insert(tag.id) }
                    current.toMany["tags"] = set.isEmpty ? nil : set
                    try context.update(current)
                }
            case 9:
                if let folder = random.pick(folders), var current = try context.record(with: folder.id) {
                    if random.chance(50) {
                        let parent = random.chance(80) ? random.pick(folders)?.id : nil
                        current.toOne["parent"] =
                            try parent.flatMap { try context.record(with: $0) }.map(\.id).flatMap {
                                $0 == current.id ? nil : $0
                            }
                    } else {
                        current["name"] = .string("f\(random.below(20))")
                    }
                    try context.update(current)
                }
            case 10:
                if let note = random.pick(notes), try context.record(with: note.id) != nil {
                    try context.delete(note.id)
                }
            default:
                if random.chance(40), let folder = random.pick(folders), try context.record(with: folder.id) != nil {
                    try context.delete(folder.id)
                } else if let tag = random.pick(tags), try context.record(with: tag.id) != nil {
                    try context.delete(tag.id)
                }
            }
        }
        // An app keeps its own records unique: a folder made or renamed with a name in use is
        // folded into the other one before the save (and the removal is a deletion like any other).
        if unique { try context.resolveDuplicates() }
        return try context.save()
    }
}
