import Foundation
import Persistence

// The values sync encodes (clocks, ids, values, changes), written and read with the codec's
// primitives.

extension BinaryWriter {
    mutating func clock(_ clock: SyncClock) {
        varint(clock.time)
        varint(UInt64(clock.counter))
        string(clock.device)
    }

    mutating func objectID(_ id: ObjectID) {
        string(id.entity)
        uuid(id.uuid)
    }

    mutating func value(_ value: Value) {
        switch value {
        case .null: byte(0)
        case .string(let text):
            byte(1)
            string(text)
        case .integer(let number):
            byte(2)
            signed(number)
        case .double(let number):
            byte(3)
            fixed64(number.bitPattern)
        case .boolean(let flag): byte(flag ? 5 : 4)
        case .date(let date):
            byte(6)
            fixed64(date.timeIntervalSinceReferenceDate.bitPattern)
        case .data(let bytes):
            byte(7)
            data(bytes)
        case .uuid(let id):
            byte(8)
            uuid(id)
        }
    }

    mutating func optional<T>(_ value: T?, _ write: (inout BinaryWriter, T) -> Void) {
        guard let value else { return byte(0) }
        byte(1)
        write(&self, value)
    }

    mutating func sorted<T>(_ dictionary: [String: T], _ write: (inout BinaryWriter, T) -> Void) {
        varint(UInt64(dictionary.count))
        for key in dictionary.keys.sorted() {
            string(key)
            write(&self, dictionary[key]!)
        }
    }

    mutating func record(_ record: Record) {
        objectID(record.id)
        sorted(record.values) { $0.value($1) }
        sorted(record.toOne) { $0.objectID($1) }
        sorted(record.toMany) { writer, targets in
            writer.varint(UInt64(targets.count))
            for target in targets.sorted() { writer.objectID(target) }
        }
    }

    mutating func change(_ change: SyncChange) {
        objectID(change.id)
        optional(change.created) { $0.clock($1) }
        optional(change.deleted) { $0.clock($1) }
        sorted(change.values) { writer, write in
            writer.value(write.value)
            writer.clock(write.clock)
        }
        sorted(change.references) { writer, write in
            writer.optional(write.target) { $0.objectID($1) }
            writer.clock(write.clock)
        }
        sorted(change.members) { writer, members in
            writer.varint(UInt64(members.count))
            for member in members {
                writer.objectID(member.target)
                writer.byte(member.present ? 1 : 0)
                writer.clock(member.clock)
            }
        }
    }

    mutating func clocks(_ clocks: RecordClocks) {
        optional(clocks.created) { $0.clock($1) }
        optional(clocks.deleted) { $0.clock($1) }
        sorted(clocks.properties) { $0.clock($1) }
        sorted(clocks.members) { writer, members in
            writer.sorted(members) { writer, member in
                writer.byte(member.present ? 1 : 0)
                writer.clock(member.clock)
            }
        }
        optional(clocks.ghost) { $0.record($1) }
        // Since 0.1: a duplicate's removal and relinked references, only when there are any
        // (clocks kept before end after the ghost).
        let premerge = clocks.premerge ?? [:]
        let relationships = clocks.premergeRelationships ?? [:]
        guard
            clocks.removedAsDuplicate != nil || !(clocks.relinked ?? [:]).isEmpty || !premerge.isEmpty
                || !relationships.isEmpty
        else {
            return
        }
        optional(clocks.removedAsDuplicate) { writer, removal in
            writer.objectID(removal.winner)
            writer.optional(removal.newest) { $0.clock($1) }
        }
        sorted(clocks.relinked ?? [:]) { $0.objectID($1) }
        // Since 0.2: a winner's attributes before a policy merged a duplicate into it, only when
        // there are any (clocks kept before end after the relinked references).
        guard !premerge.isEmpty || !relationships.isEmpty else { return }
        sorted(premerge) { writer, kept in
            writer.value(kept.value)
            writer.optional(kept.clock) { $0.clock($1) }
        }
        // Since 0.3: a winner's owning relationships before a merge, only when there are any.
        guard !relationships.isEmpty else { return }
        sorted(relationships) { writer, kept in
            writer.optional(kept.target) { $0.objectID($1) }
            writer.optional(kept.clock) { $0.clock($1) }
            writer.sorted(kept.elements) { writer, element in
                writer.byte(element.present ? 1 : 0)
                writer.optional(element.clock) { $0.clock($1) }
            }
        }
    }
}

extension BinaryReader {
    mutating func clock() throws(BinaryCodecError) -> SyncClock {
        let time = try varint()
        let counter = try varint()
        guard let counter = UInt32(exactly: counter) else { throw BinaryCodecError("a clock counter of \(counter)") }
        return SyncClock(time: time, counter: counter, device: try string())
    }

    mutating func objectID() throws(BinaryCodecError) -> ObjectID {
        let entity = try string()
        return ObjectID(entity: entity, uuid: try uuid())
    }

    mutating func value() throws(BinaryCodecError) -> Value {
        switch try byte() {
        case 0: return .null
        case 1: return .string(try string())
        case 2: return .integer(try signed())
        case 3: return .double(Double(bitPattern: try fixed64()))
        case 4: return .boolean(false)
        case 5: return .boolean(true)
        case 6: return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try fixed64())))
        case 7: return .data(try data())
        case 8: return .uuid(try uuid())
        case let tag: throw BinaryCodecError("a value with tag \(tag)")
        }
    }

    mutating func optional<T>(_ read: (inout BinaryReader) throws(BinaryCodecError) -> T) throws(BinaryCodecError) -> T?
    {
        try flag() ? try read(&self) : nil
    }

    /// A dictionary written by ``BinaryWriter/sorted(_:_:)``; each entry takes at least two bytes.
    mutating func dictionary<T>(
        _ read: (inout BinaryReader) throws(BinaryCodecError) -> T
    ) throws(BinaryCodecError) -> [String: T] {
        let count = try count(minimumSize: 2)
        var result: [String: T] = [:]
        result.reserveCapacity(count)
        for _ in 0..<count {
            let key = try string()
            result[key] = try read(&self)
        }
        return result
    }

    mutating func record() throws(BinaryCodecError) -> Record {
        let id = try objectID()
        let values = try dictionary { reader throws(BinaryCodecError) in try reader.value() }
        let toOne = try dictionary { reader throws(BinaryCodecError) in try reader.objectID() }
        let toMany = try dictionary { reader throws(BinaryCodecError) -> Set<ObjectID> in
            let count = try reader.count(minimumSize: 17)
            var targets = Set<ObjectID>(minimumCapacity: count)
            for _ in 0..<count { targets.insert(try reader.objectID()) }
            return targets
        }
        return Record(id: id, values: values, toOne: toOne, toMany: toMany)
    }

    mutating func change() throws(BinaryCodecError) -> SyncChange {
        var change = SyncChange(id: try objectID())
        change.created = try optional { reader throws(BinaryCodecError) in try reader.clock() }
        change.deleted = try optional { reader throws(BinaryCodecError) in try reader.clock() }
        change.values = try dictionary { reader throws(BinaryCodecError) in
            let value = try reader.value()
            return ClockedValue(value: value, clock: try reader.clock())
        }
        change.references = try dictionary { reader throws(BinaryCodecError) in
            let target = try reader.optional { reader throws(BinaryCodecError) in try reader.objectID() }
            return ClockedReference(target: target, clock: try reader.clock())
        }
        change.members = try dictionary { reader throws(BinaryCodecError) -> [ClockedMember] in
            let count = try reader.count(minimumSize: 20)
            var members: [ClockedMember] = []
            members.reserveCapacity(count)
            for _ in 0..<count {
                let target = try reader.objectID()
                let present = try reader.flag()
                members.append(ClockedMember(target: target, present: present, clock: try reader.clock()))
            }
            return members
        }
        return change
    }

    mutating func clocks() throws(BinaryCodecError) -> RecordClocks {
        var clocks = RecordClocks()
        clocks.created = try optional { reader throws(BinaryCodecError) in try reader.clock() }
        clocks.deleted = try optional { reader throws(BinaryCodecError) in try reader.clock() }
        clocks.properties = try dictionary { reader throws(BinaryCodecError) in try reader.clock() }
        clocks.members = try dictionary { reader throws(BinaryCodecError) in
            try reader.dictionary { reader throws(BinaryCodecError) in
                let present = try reader.flag()
                return RecordClocks.MemberClock(present: present, clock: try reader.clock())
            }
        }
        clocks.ghost = try optional { reader throws(BinaryCodecError) in try reader.record() }
        guard !isAtEnd else { return clocks }
        clocks.removedAsDuplicate = try optional { reader throws(BinaryCodecError) in
            let winner = try reader.objectID()
            let newest = try reader.optional { reader throws(BinaryCodecError) in try reader.clock() }
            return RecordClocks.DuplicateRemoval(winner: winner, newest: newest)
        }
        let relinked = try dictionary { reader throws(BinaryCodecError) in try reader.objectID() }
        clocks.relinked = relinked.isEmpty ? nil : relinked
        guard !isAtEnd else { return clocks }
        let premerge = try dictionary { reader throws(BinaryCodecError) in
            let value = try reader.value()
            let clock = try reader.optional { reader throws(BinaryCodecError) in try reader.clock() }
            return RecordClocks.PremergeValue(value: value, clock: clock)
        }
        clocks.premerge = premerge.isEmpty ? nil : premerge
        guard !isAtEnd else { return clocks }
        let relationships = try dictionary { reader throws(BinaryCodecError) in
            let target = try reader.optional { reader throws(BinaryCodecError) in try reader.objectID() }
            let clock = try reader.optional { reader throws(BinaryCodecError) in try reader.clock() }
            let elements = try reader.dictionary { reader throws(BinaryCodecError) in
                let present = try reader.flag()
                let clock = try reader.optional { reader throws(BinaryCodecError) in try reader.clock() }
                return RecordClocks.PremergeElement(present: present, clock: clock)
            }
            return RecordClocks.PremergeRelationship(target: target, clock: clock, elements: elements)
        }
        clocks.premergeRelationships = relationships.isEmpty ? nil : relationships
        return clocks
    }
}
