import Foundation

/// One key of a fetch's order.
public struct RecordSort: Sendable, Hashable, Codable {
    /// The attribute to order by.
    public var key: String
    /// Smallest first (`null` first) when true; largest first (`null` last) otherwise.
    public var ascending: Bool

    /// Orders by `key`.
    public init(_ key: String, ascending: Bool = true) {
        self.key = key
        self.ascending = ascending
    }
    /// Orders by `key`, smallest first.
    public static func ascending(_ key: String) -> RecordSort { RecordSort(key, ascending: true) }
    /// Orders by `key`, largest first.
    public static func descending(_ key: String) -> RecordSort { RecordSort(key, ascending: false) }
}

/// What to fetch: the records of one entity that match a predicate, in an order, a page of them.
///
/// Every store returns the same records in the same order for the same request: values order as
/// ``Value/compare(to:)`` says, and records that tie on every sort key order by id (so a page
/// boundary is stable).
public struct FetchRequest: Sendable, Hashable, Codable {
    /// The entity whose records are fetched.
    public var entity: String
    /// Which of them.
    public var predicate: RecordPredicate
    /// Their order, before the final tie-break by id.
    public var sortDescriptors: [RecordSort]
    /// At most this many (all when `nil`).
    public var fetchLimit: Int?
    /// Skipping this many first.
    public var fetchOffset: Int

    /// A request for the records of `entity`.
    public init(
        entity: String,
        predicate: RecordPredicate = .constant(true),
        sortedBy sortDescriptors: [RecordSort] = [],
        limit: Int? = nil,
        offset: Int = 0
    ) {
        self.entity = entity
        self.predicate = predicate
        self.sortDescriptors = sortDescriptors
        self.fetchLimit = limit
        self.fetchOffset = offset
    }

    /// Checks the request against `schema`: the entity exists, every key names one of its
    /// properties, values fit their attributes, limit and offset are not negative.
    @discardableResult
    public func validate(in schema: Schema) throws(PersistenceError) -> EntityDescription {
        guard let description = schema.entity(entity) else {
            throw PersistenceError(.invalidRequest, "no entity \(entity) in schema version \(schema.version)")
        }
        try predicate.validate(for: description)
        for sort in sortDescriptors where description.attribute(sort.key) == nil {
            throw PersistenceError(.invalidRequest, "cannot sort \(entity) by \(sort.key): no such attribute")
        }
        guard fetchOffset >= 0, (fetchLimit ?? 0) >= 0 else {
            throw PersistenceError(.invalidRequest, "a fetch limit and offset cannot be negative")
        }
        return description
    }

    /// Whether `record` is one this request fetches (its entity and predicate).
    public func matches(_ record: Record) -> Bool {
        record.id.entity == entity && predicate.matches(record)
    }

    /// Whether `lhs` comes before `rhs` in this request's order.
    public func areInIncreasingOrder(_ lhs: Record, _ rhs: Record) -> Bool {
        for sort in sortDescriptors {
            switch lhs[sort.key].compare(to: rhs[sort.key]) ?? .orderedSame {
            case .orderedSame: continue
            case .orderedAscending: return sort.ascending
            case .orderedDescending: return !sort.ascending
            }
        }
        return lhs.id < rhs.id
    }

    /// The request evaluated in memory over `records`: matched, ordered, paged.
    public func evaluate(over records: some Sequence<Record>) -> [Record] {
        var matched = records.filter(matches)
        matched.sort(by: areInIncreasingOrder)
        let start = min(fetchOffset, matched.count)
        let end = fetchLimit.map { min(start + $0, matched.count) } ?? matched.count
        return Array(matched[start..<end])
    }
}
