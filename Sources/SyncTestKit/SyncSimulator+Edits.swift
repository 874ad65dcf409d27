import Foundation
import Persistence

extension SyncSimulator {
    /// One random save of one to three changes to `coordinator`'s records of ``schema``: inserts,
    /// updates, deletes and relationship changes drawn from `random`. The simulator's devices and
    /// the multi-process sync test's helper processes edit with it.
    ///
    /// Edits set exactly the properties they change (`ObjectContext.setValue(_:forKey:of:)` and
    /// its relatives), as an app's edit of one field does: each is a write even where the
    /// device's store already held that value.
    @discardableResult
    public static func saveRandomEdits(
        in coordinator: StoreCoordinator,
        random: inout SimulationRandom
    ) throws -> ChangeSet {
        var writes: [AttributeWrite] = []
        return try saveRandomEdits(in: coordinator, random: &random, writes: &writes)
    }

    /// One property an edit set explicitly, with the value it set: an attribute; a to-one
    /// relationship (key ``toOneKey(_:)``, value the target's id as a string, or `.null`); or one
    /// element of a to-many relationship (key ``memberKey(_:_:)``, value whether it is a member).
    public struct AttributeWrite: Sendable, Hashable {
        /// The record.
        public var id: ObjectID
        /// The attribute, or the relationship's key (see above).
        public var key: String
        /// The value set.
        public var value: Value

        /// A write of attribute `key`.
        public init(id: ObjectID, key: String, value: Value) {
            self.id = id
            self.key = key
            self.value = value
        }

        /// A write of to-one `relationship` to `target`.
        public init(id: ObjectID, relationship: String, target: ObjectID?) {
            self.init(id: id, key: Self.toOneKey(relationship), value: target.map { .string("\($0)") } ?? .null)
        }

        /// A write of `member`'s membership in to-many `relationship`.
        public init(id: ObjectID, relationship: String, member: ObjectID, isMember: Bool) {
            self.init(id: id, key: Self.memberKey(relationship, member), value: .boolean(isMember))
        }

        /// The key of a write of to-one `relationship`.
        public static func toOneKey(_ relationship: String) -> String { "->" + relationship }

        /// The key of a write of `member`'s membership in to-many `relationship`.
        public static func memberKey(_ relationship: String, _ member: ObjectID) -> String {
            "\(relationship)[\(member)]"
        }

        /// What `record` holds of the property `key` names, as a write of it would say it.
        public static func current(_ key: String, of record: Record) -> Value {
            if key.hasPrefix("->") {
                return record.toOne[String(key.dropFirst(2))].map { .string("\($0)") } ?? .null
            }
            if key.hasSuffix("]"), let open = key.firstIndex(of: "[") {
                let relationship = String(key[..<open])
                let member = key[key.index(after: open)..<key.index(before: key.endIndex)]
                return .boolean(record.toMany[relationship]?.contains { "\($0)" == member } ?? false)
            }
            return record[key]
        }

        /// The target a to-one write names, or the member a to-many write names (`nil` for an
        /// attribute, or a to-one write that clears it).
        public static func target(of key: String, value: Value) -> String? {
            if key.hasPrefix("->") { if case .string(let id) = value { return id } else { return nil } }
            guard key.hasSuffix("]"), let open = key.firstIndex(of: "[") else { return nil }
            return String(key[key.index(after: open)..<key.index(before: key.endIndex)])
        }
    }

    /// ``saveRandomEdits(in:random:)``, adding to `writes` the properties its edits set
    /// explicitly (creations not included: the change set lists what they hold).
    @discardableResult
    public static func saveRandomEdits(
        in coordinator: StoreCoordinator,
        random: inout SimulationRandom,
        writes: inout [AttributeWrite]
    ) throws -> ChangeSet {
        let context = ObjectContext(coordinator: coordinator, origin: .local, name: "edit")
        func set(_ value: Value, _ key: String, of id: ObjectID) throws {
            try context.setValue(value, forKey: key, of: id)
            writes.append(AttributeWrite(id: id, key: key, value: value))
        }
        func setTarget(_ target: ObjectID?, _ key: String, of id: ObjectID) throws {
            try context.setTarget(target, forKey: key, of: id)
            writes.append(AttributeWrite(id: id, relationship: key, target: target))
        }
        func setMember(_ member: ObjectID, _ isMember: Bool, _ key: String, of id: ObjectID) throws {
            if isMember {
                try context.addTargets([member], forKey: key, of: id)
            } else {
                try context.removeTargets([member], forKey: key, of: id)
            }
            writes.append(AttributeWrite(id: id, relationship: key, member: member, isMember: isMember))
        }
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
                if let note = random.pick(notes), try context.record(with: note.id) != nil {
                    try set(.string("n\(random.below(1000))"), "title", of: note.id)
                    // (Few ranks: a device often sets the value its stale store holds while another changes it.)
                    if random.chance(50) { try set(.integer(Int64(random.below(3))), "rank", of: note.id) }
                }
            case 6:
                if let note = random.pick(notes), let current = try context.record(with: note.id) {
                    // (Now and then the folder the device's store shows already: a move its stale
                    // store agrees with is a write all the same.)
                    let folder =
                        random.chance(30) ? current.toOne["folder"] : random.chance(80) ? random.pick(folders)?.id : nil
                    try setTarget(try folder.flatMap { try context.record(with: $0) }?.id, "folder", of: note.id)
                }
            case 7, 8:
                if let note = random.pick(notes), let tag = random.pick(tags),
                    let current = try context.record(with: note.id),
                    try context.record(with: tag.id) != nil
                {
                    // (Now and then what the device's store shows already: tagging a note its stale
                    // store shows tagged is a write all the same.)
                    let tagged = current.toMany["tags"]?.contains(tag.id) == true
                    try setMember(tag.id, random.chance(30) ? tagged : !tagged, "tags", of: note.id)
                }
            case 9:
                if let folder = random.pick(folders), let current = try context.record(with: folder.id) {
                    if random.chance(50) {
                        let parent = random.chance(80) ? random.pick(folders)?.id : nil
                        let target = try parent.flatMap { try context.record(with: $0) }.map(\.id).flatMap {
                            $0 == current.id ? nil : $0
                        }
                        try setTarget(target, "parent", of: folder.id)
                    } else {
                        try set(.string("f\(random.below(20))"), "name", of: folder.id)
                    }
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
